"""Findings: what limits each run, in sentences with evidence, ranked by the time at stake.

``diagnose`` walks the POP hierarchy (``perfkit.analysis.pop``) from the largest loss down. The
time lost per rank, ``T - mean_r C_r`` (elapsed minus mean compute), splits exactly into

* load imbalance ``max_r C_r - mean_r C_r`` (load balance),
* waits the compute imbalance does not explain ``T_ideal - max_r C_r`` (serialisation efficiency:
  on an ideal network the run would still take ``T_ideal`` while no rank computes longer than
  ``max_r C_r``),
* transfer ``T - T_ideal`` (transfer efficiency).

The first finding of a run (category ``efficiency``) states the hierarchy and names the largest
loss. Low load balance (below ``BALANCED``) is named as such, with the slow ranks. Waits that the
compute imbalance does not explain are never called load imbalance: the finding lists what they
could be (serialisation, dynamic imbalance, interference, ranks sharing cores, the network) and
what measurement tells them apart, because a profile (per-rank totals) cannot. Every number says
whether it is measured or modelled (waits estimated by ``waits.wait_split``). Per call, large
late-sender or collective wait means ranks arrive late (waiting, not moving data). It adds the
common observations of scaling studies: the communication share rising with scale,
MPI_Allreduce / MPI_Bcast dominating MPI time, and small, latency-bound messages.

Where CPU was measured (``perfkit collect``: ``cpu_time`` and ``rank_cpu``; ``perfkit.analysis.cpu``),
the time ranks waited for a core (the kernel's run delay) is named (category ``cpu``):
oversubscription when a node has more ranks than cores, interference otherwise, above ``NO_CORE`` of
elapsed. Only the delay in compute and in MPI calls outside their waits is at stake (a rank waiting
anyway loses nothing off its core). The efficiency summary counts it as a loss of its own, and the
transfer, unexplained-wait, late-receiver and dynamic-imbalance findings leave it out, saying so. On
one node (one host name) transfers are called shared memory and no finding advises a faster network.

Every finding has the run, a ``category``, a ``title``, a ``lead`` (one sentence of at most
``LEAD_CHARS`` characters: what was found, with its main number), ``details`` (the numbers, ranks
and functions behind it), ``caveats`` (keys of ``CAVEATS``, the limits shared by several findings,
said once by a report; space-separated), ``text`` (lead, details and the caveats' sentences),
``seconds`` (time at stake per rank [s]: what the cause costs the elapsed time at most), ``share``
(seconds / elapsed) and ``severity`` (high >= 10 % of elapsed, medium >= 3 %, else low). Numbers
are written by ``perfkit.text``: a unit that fits, never NaN or an exponent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit import text as fmt
from perfkit.analysis.cpu import cpu_summary, cpu_usage, has_cpu, host_counts
from perfkit.analysis.cube import evaluate, nan_sum, per_rank, run_chunks, with_loaded_coords
from perfkit.analysis.imbalance import by_node, mpi_share, rank_values, size_summary, slow_ranks, stats_over_ranks
from perfkit.analysis.phases import call_phases, has_phases, late_rank_list, phase_excess, send_chain
from perfkit.analysis.pop import pop_from_parts, startup_per_rank
from perfkit.analysis.waits import WAIT_KINDS, call_wait_share, split_and_breakdown

COLUMNS = ["run", "category", "title", "lead", "details", "caveats", "text", "seconds", "share", "severity"]
#: Ranks as contiguous ranges (``0-3, 7``).
format_ranks = fmt.rank_ranges
#: The longest lead sentence [characters].
LEAD_CHARS = 200
HIGH, MEDIUM = 0.10, 0.03
#: A call whose wait share is at least this is reported as a wait problem.
WAIT_SHARE = 0.5
#: A node whose fastest rank is this much slower than the typical node's fastest is a slow node.
SLOW_NODE = 0.05
#: A slow node's fastest rank stands off the line through the nodes' fastest ranks by this many times the
#: scatter of the other nodes about it (``_scatter_without_each``): thousands of nodes whose floors vary by
#: chance are not thousands of slow nodes.
NODE_SCATTER = 5.0
#: Nodes needed to tell a gradient of compute over the ranks from a slow node, and the pairs of nodes
#: (at most) that estimate the gradient.
MIN_NODES_FOR_TREND, TREND_PAIRS = 4, 200_000
#: A rank whose compute exceeds the mean by this much is a slow rank.
SLOW_RANK = 0.10
#: Compute load balance (mean/max) at or above this is balanced: no load-imbalance finding.
BALANCED = 0.95
#: A run losing less than this share of its elapsed time is efficient (POP's "good" is >= 0.8 per
#: factor; a loss under 10 % is not worth a finding of its own).
EFFICIENT = 0.90
#: A rank whose wait at a collective is below this share of every other rank's is last at every call.
ALWAYS_LAST = 0.1
#: Bytes per second of transfer time below which transfers are too slow for any network [B/s].
SLOW_TRANSFER = 10e6
UNKNOWN_CAUSES = ("serialisation (ranks waiting on each other in turn, as in a pipeline), dynamic imbalance "
                  "(a different rank late in each step), interference (OS noise, other jobs on the nodes), "
                  "ranks sharing cores, or the network (transfers that vary)")
TELL_APART = ("a profile holds per-rank totals and cannot tell them apart; a trace (per-step times per rank) "
              "can, and `perfkit collect --slt` measures the waits")
#: Limits several findings share: a report says each once, a finding names it by key in ``caveats``.
CAVEATS = {
    "cannot_tell": f"Waits the compute totals do not explain could be {UNKNOWN_CAUSES}: {TELL_APART}.",
    "estimated": ("Waits marked modelled are estimated by the wait split (the fastest rank's time in a call is "
                  "transfer, the rest waiting); measured waits (`perfkit collect --slt --collective-wait`) make "
                  "them exact."),
    "perfect_network": "A perfect interconnect removes at most the transfer time; the waits remain.",
    "no_core": ("Time without a core is the kernel's run delay of each rank's main thread (measured); its split "
                "between compute and MPI calls is modelled: a thread sharing a core waits in proportion to the CPU "
                "time it uses, within each part's wall - CPU time."),
}
#: Mean time per rank without a core (run delay), as a share of elapsed, from which ranks lacked cores: a quiet
#: node's run delay (kernel threads, timer ticks, the MPI runtime's own threads) stays below 1 % of the time; 5 %
#: leaves room for a shared login node's daemons and is above MEDIUM, so the finding is never low severity.
NO_CORE = 0.05
#: Ranks that waited for a core this many times longer than sharing the cores alone makes busy ranks wait (the
#: region x (1 - cores / ranks)) also lost them to other load.
OTHER_LOAD = 1.25


@dataclass(frozen=True)
class _Context:
    """What several finders use, computed once per chunk of runs of a ``diagnose`` call."""

    elapsed: pd.Series  #: elapsed time per run [s]
    ranks: pd.Series  #: number of ranks that exist, per run
    split: xr.Dataset  #: ``wait_split``: transfer and wait time [s] per run, rank and call
    parts: xr.Dataset  #: ``breakdown``: time [s] per run, rank and kind
    compute: xr.DataArray  #: compute time [s] per run and rank
    mpi: pd.DataFrame  #: ``mpi_share``: MPI time [s] and calls per run and call
    pop: xr.Dataset  #: ``pop_metrics``: the POP efficiencies and the times behind them, per run
    startup: np.ndarray  #: start-up and shut-down time [s] per run and rank
    moved: np.ndarray  #: bytes sent and received [B] in transfer functions, (run, rank, 2)
    transfer_calls: np.ndarray  #: calls of transfer functions per run and rank
    hosts: np.ndarray  #: distinct host names per run (0: unknown)
    no_core: tuple[_NoCore | None, ...]  #: time without a core per run, None where CPU was not measured


@dataclass(frozen=True)
class _NoCore:
    """Time ranks of one run spent without a core (``cpu.cpu_usage``), means per rank [s] unless said."""

    delay: float  #: run delay: runnable, waiting for a core [s]
    compute: float  #: of it in compute [s] (modelled split)
    transfer: float  #: of it in MPI calls outside their waits for other ranks [s] (modelled split)
    waiting: float  #: of it while waiting for other ranks in MPI calls [s] (modelled split): costs nothing
    on_cpu: float  #: CPU time of the main thread in the parallel region [s]
    region: float  #: the parallel region's wall time [s]
    compute_wall: float  #: compute's wall time [s]
    compute_cpu: float  #: compute's CPU time [s]
    availability: float  #: compute CPU / compute wall time over all ranks [1]
    involuntary: float  #: involuntary context switches [1]
    voluntary: float  #: voluntary context switches [1]
    shared: np.ndarray  #: the ranks on hosts with more ranks than cores
    on_host: int  #: ranks on the most oversubscribed host (0: none is)
    cores: float  #: that host's cores (a CPU quota may be a fraction)
    hosts: int  #: how many hosts are oversubscribed, of ``of_hosts``
    of_hosts: int
    applies: bool  #: the time at stake is above the noise floor (``NO_CORE`` of elapsed)

    @property
    def seconds(self) -> float:
        """The time at stake [s]: without a core in compute and in MPI calls outside their waits. A rank that
        waits for another anyway loses nothing waiting off its core; its partners wait for its compute."""
        return self.compute + self.transfer

    @property
    def oversubscribed(self) -> bool:
        return self.on_host > 0

    def transfer_and_wait(self, transfer: float, waits: float) -> tuple[float, float]:
        """What to take off the ``transfer`` loss (the time without a core in MPI calls outside waits: it
        stretched them) and off ``waits`` (the compute's: partners waited for ranks without a core) [s], at
        most each; 0 when the finding does not apply (modelled)."""
        if not self.applies:
            return 0.0, 0.0
        return min(self.transfer, max(transfer, 0.0)), min(self.compute, max(waits, 0.0))


def _no_cores(ds: xr.Dataset, parts: xr.Dataset, pop: xr.Dataset, hosts: np.ndarray) -> tuple[_NoCore | None, ...]:
    """Each run's time without a core (``parts``: its ``breakdown``; ``pop``: its ``pop_metrics``; ``hosts``: its
    distinct host names), None where CPU was not measured."""
    if not has_cpu(ds):
        return (None,) * ds.sizes["run"]
    usage = cpu_usage(ds)
    summary = cpu_summary(usage)
    waits = parts["time"].sel(kind=list(WAIT_KINDS)).sum("kind").values
    with np.errstate(invalid="ignore", divide="ignore"):
        waiting = usage["delay_mpi"].values * np.clip(np.nan_to_num(waits / usage["mpi_wall"].values), 0.0, 1.0)
    return tuple(_no_core(usage.isel(run=i), summary.isel(run=i), waiting[i], float(pop["elapsed"][i]),
                          int(hosts[i])) if bool(summary["measured"][i]) else None for i in range(ds.sizes["run"]))


def _no_core(usage: xr.Dataset, summary: xr.Dataset, waiting: np.ndarray, elapsed: float, hosts: int) -> _NoCore:
    """One run's time without a core from its ``cpu_usage`` and ``cpu_summary``, the run delay per rank while
    waiting for other ranks [s], its elapsed time [s] and number of host names (0: unknown)."""
    over = usage["oversubscription"].values
    ranks = usage["rank"].values
    sharing = over > 1
    worst = int(np.nanargmax(np.where(np.isnan(over), -np.inf, over))) if sharing.any() else -1
    on_host = usage["ranks_on_host"].values
    mean = {name: float(summary[name]) for name in ("run_delay", "delay_compute", "delay_mpi", "compute_cpu",
                                                     "mpi_cpu", "region", "compute_wall", "involuntary_switches",
                                                     "voluntary_switches", "cpu_availability")}
    on_hosts = np.nansum(np.where(sharing, 1.0 / np.where(on_host > 0, on_host, np.nan), 0.0))
    waiting_mean = float(np.nanmean(waiting))
    compute, transfer = mean["delay_compute"], mean["delay_mpi"] - waiting_mean
    return _NoCore(delay=mean["run_delay"], compute=compute, transfer=transfer, waiting=waiting_mean,
                   on_cpu=mean["compute_cpu"] + mean["mpi_cpu"], region=mean["region"],
                   compute_wall=mean["compute_wall"], compute_cpu=mean["compute_cpu"],
                   availability=mean["cpu_availability"], involuntary=mean["involuntary_switches"],
                   voluntary=mean["voluntary_switches"], shared=ranks[sharing],
                   on_host=int(on_host[worst]) if worst >= 0 else 0,
                   cores=float(usage["cores"].values[worst]) if worst >= 0 else 0.0, hosts=round(on_hosts),
                   of_hosts=hosts or 1, applies=compute + transfer >= NO_CORE * elapsed)


def _cores_text(cores: float) -> str:
    """``1 core``, ``2 cores``, ``1.5 cores`` (a CPU quota)."""
    return f"{cores:,.3g} core" + ("" if cores == 1 else "s")


def _no_core_cause(nc: _NoCore) -> str:
    """What took the cores: ``N ranks on a node with C cores`` (oversubscription), else interference."""
    if nc.oversubscribed:
        where = "a node" if nc.of_hosts == 1 else f"a node ({nc.hosts} of {nc.of_hosts} nodes alike)"
        return f"{fmt.plural(nc.on_host, 'rank')} on {where} with {_cores_text(nc.cores)}"
    return "other load took the cores, no node having more ranks than cores"


def _no_core_split(nc: _NoCore) -> str:
    """Sentence: the time without a core, its split, the switches and the compute's CPU availability."""
    rate = nc.involuntary / nc.region if nc.region > 0 else np.nan
    shown = nc.waiting >= 0.005 * nc.delay
    waiting = f" and {fmt.seconds(nc.waiting)} while waiting for other ranks in MPI calls" if shown else ""
    free = " (modelled split); the last costs nothing: a rank waiting anyway loses no time off its core" if shown \
        else " (modelled split)"
    return (f"The ranks waited {fmt.seconds(nc.delay)} per rank for a core (run delay, measured): about "
            f"{fmt.seconds(nc.compute)} in compute, {fmt.seconds(nc.transfer)} in MPI calls outside their waits"
            f"{waiting}{free}. At stake: {fmt.seconds(nc.seconds)} per rank. "
            f"{fmt.count(nc.involuntary)} involuntary context switches per rank ({fmt.count(rate)} per second), "
            f"against {fmt.count(nc.voluntary)} voluntary: the scheduler took the core away. Compute ran on a CPU "
            f"{fmt.percent(nc.availability)} of its wall time ({fmt.seconds(nc.compute_cpu)} of "
            f"{fmt.seconds(nc.compute_wall)} per rank: CPU availability {nc.availability:.2f}).")


def diagnose(ds: xr.Dataset, run: str | None = None) -> pd.DataFrame:
    """Findings for ``run`` (or every run, plus trends across runs), most time at stake first.

    A lazy, dask-backed cube is diagnosed one chunk of runs at a time (``cube.run_chunks``) and
    reduced block by block: only one chunk's per-rank values (its wait split, its breakdown) are
    held at once, so memory does not grow with the number of runs.
    """
    runs = [run] if run is not None else [str(r) for r in ds["run"].values]
    sub = with_loaded_coords(ds.drop_vars("traffic", errors="ignore").sel(run=runs))
    empty: list[dict[str, Any]] = []
    found: list[list[dict[str, Any]]] = [[] for _ in range(len(_FINDERS) + 1)]
    elapsed_parts, mpi_parts = [], []
    for part in run_chunks(sub):
        measured = part["profile"].sel(metric="time").notnull().any(("rank", "function")).values
        empty += [_empty_finding(ds, str(r)) for r in part["run"].values[~measured]]
        if not measured.any():
            continue
        rows, times, share = _chunk_findings(part.isel(run=np.flatnonzero(measured)), ds)
        for kept, new in zip(found, rows):
            kept += new
        elapsed_parts.append(times)
        mpi_parts.append(share)
    rows = empty + [row for rows in found for row in rows]
    if not elapsed_parts:
        return pd.DataFrame(rows, columns=COLUMNS).assign(share=np.nan, severity="info")
    elapsed = pd.concat(elapsed_parts)
    if run is None:
        rows += _trend_findings(sub.sel(run=elapsed.index), pd.concat(mpi_parts, ignore_index=True), elapsed)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["share"] = table["seconds"] / elapsed.reindex(table["run"]).to_numpy()
    info = table["category"].isin(["mpi_share", "empty"])
    table["severity"] = np.select([info, table["share"] >= HIGH, table["share"] >= MEDIUM],
                                  ["info", "high", "medium"], "low")
    position = {r: i for i, r in enumerate(runs)}  # ties in run order, however the runs were chunked
    order = table.assign(_key=table["seconds"].round(9), _first=table["category"] != "efficiency",
                         _run=table["run"].map(position).fillna(len(runs)))
    order = order.sort_values(["_key", "_first", "_run"], ascending=[False, True, True], kind="stable")
    return table.loc[order.index].reset_index(drop=True)


def _chunk_findings(ds: xr.Dataset, full: xr.Dataset) -> tuple[list[list[dict[str, Any]]], pd.Series, pd.DataFrame]:
    """The findings of each finder (``_FINDERS``, then the trace's) for the runs of ``ds`` (one chunk of
    runs, every run measured), their elapsed time [s] and ``mpi_share``. ``full`` is the whole Dataset
    (traffic included). The chunk's per-rank values are freed on return.
    """
    context = _context(ds)
    rows = [finder(ds, context) for finder in _FINDERS]
    return [*rows, _trace_findings(ds, context, full)], context.elapsed, context.mpi


def _context(ds: xr.Dataset) -> _Context:
    """The shared quantities of ``ds`` (the runs being diagnosed)."""
    split, parts = split_and_breakdown(ds)
    sums, startup = evaluate(_rank_sums(ds), startup_per_rank(ds))
    longest = np.fmax.reduce(sums[..., 0], axis=1)
    given = ds["elapsed"].values
    runs = ds["run"].values
    exists = parts["total"].notnull().values
    pop, hosts = pop_from_parts(ds, parts), host_counts(ds, exists)
    return _Context(elapsed=pd.Series(np.where(np.isnan(given), longest, given), index=runs),
                    ranks=pd.Series(exists.sum(axis=1), index=runs), split=split,
                    parts=parts, compute=rank_values(ds), mpi=mpi_share(ds), pop=pop,
                    startup=startup, moved=sums[..., 1:3], transfer_calls=sums[..., 3], hosts=hosts,
                    no_core=_no_cores(ds, parts, pop, hosts))


def _rank_sums(ds: xr.Dataset) -> Any:
    """Per (run, rank): total time [s] (NaN for absent ranks), then bytes sent, bytes received [B] and calls
    in transfer functions; a (run, rank, 4) array, lazy on a dask-backed cube.
    """
    transfer = ds["kind"].values == "transfer"

    def sums(block: np.ndarray) -> np.ndarray:
        moved = [np.nansum(block[..., transfer, m], axis=-1) for m in (1, 2, 3)]
        return np.stack([nan_sum(block[..., 0], axis=2), *moved], axis=-1)

    return per_rank(ds, sums, ["time", "bytes_sent", "bytes_recv", "calls"])


def _row(run: str, category: str, title: str, lead: str, details: str, seconds: float,
         caveats: tuple[str, ...] = ()) -> dict[str, Any]:
    """One finding; ``text`` is the lead, the details and the sentences of ``caveats`` (keys of ``CAVEATS``)."""
    return {"run": run, "category": category, "title": title, "lead": lead, "details": details,
            "caveats": " ".join(caveats), "text": fmt.sentences(lead, details, *(CAVEATS[c] for c in caveats)),
            "seconds": float(seconds)}


def _empty_finding(ds: xr.Dataset, run: str) -> dict[str, Any]:
    """A run without measured time: what a concise mpiP report states over ranks instead, or nothing."""
    stated = ds["mpi_pct"].sel(run=run).item() if "mpi_pct" in ds else np.nan
    if not np.isfinite(stated):
        return _row(run, "empty", "No measured values", f"Run {run} holds no measured time on any rank or function: "
                    "there is nothing to diagnose.", "A reader found no data, or the run never reached its profile.",
                    0.0)
    task = ds["task_time"].sel(run=run) if "task_time" in ds else None
    details = "Per-rank times are not in a concise report (mpiP -c): load balance and the split of the loss need " \
              "a verbose one."
    if task is not None and {"app", "mpi"} <= set(map(str, task["task_metric"].values)):
        mpi, app = (float(task.sel(task_metric=m, task_stat="mean")) for m in ("mpi", "app"))
        if np.isfinite(mpi) and np.isfinite(app):
            details = f"Mean MPI time {fmt.seconds(mpi)} of {fmt.seconds(app)} per rank. " + details
    lead = f"MPI takes {fmt.percent(stated / 100)} of the aggregate time, as the concise mpiP report states it."
    return _row(run, "mpi_share", "Where MPI time goes (concise report)", lead, details, 0.0)


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
            lead, details = _wait_text(call, kind, ratio[i, j], mean_wait[i, j], bool(estimated[i, j]))
            details = fmt.sentences(details, _compute_link(waits[i, :, j], compute[i], context.pop.isel(run=i)))
            if (nc := context.no_core[i]) is not None and nc.applies:
                details += (f" The ranks also waited {fmt.seconds(nc.compute)} per rank for a core in their compute "
                            "(see the finding on time without a core): a rank without one arrives late.")
            rows.append(_row(run, kind, f"{call}: {_wait_name(kind)}", lead, details, mean_wait[i, j],
                             ("estimated",) if estimated[i, j] else ()))
    return rows


def _wait_name(kind: str) -> str:
    """What a wait of ``kind`` (``wait_collective``, ``wait_late_receiver`` or ``wait_late_sender``) is called."""
    return {"wait_collective": "collective wait", "wait_late_receiver": "late-receiver wait"}.get(kind,
                                                                                                 "late-sender wait")


def _wait_text(call: str, kind: str, share: float, mean_wait: float, estimated: bool) -> tuple[str, str]:
    """Lead and details on a call's wait: its share of the call's time [0-1] and mean per rank [s]."""
    how = "modelled" if estimated else "measured"
    causes = {"wait_collective": "ranks arrive late at the collective",
              "wait_late_receiver": "the matching receives are posted late"}
    cause = causes.get(kind, "the matching sends are posted late")
    lead = (f"{fmt.percent(share)} of {call} time is {_wait_name(kind)} ({how}), "
            f"{fmt.seconds(mean_wait)} per rank on average.")
    details = (f"It is time spent waiting, not moving data: {cause}"
               + (", estimated from the time above the fastest rank's in the call." if estimated else "."))
    return lead, details


def _compute_link(wait: np.ndarray, work: np.ndarray, pop: xr.Dataset) -> str:
    """Sentence relating a call's per-rank wait to compute time, and how much load imbalance explains.

    ``pop`` is the run's row of ``pop_metrics``. Anti-correlation (ranks that compute more wait
    less) is load imbalance only up to ``max - mean`` compute; a balanced run's waits are not.
    """
    ok = ~np.isnan(wait) & ~np.isnan(work)
    if int(ok.sum()) < 3 or not _varies(wait, ok) or not _varies(work, ok):
        return ""
    r = float(np.corrcoef(wait[ok], work[ok])[0, 1])
    if r > -0.5:
        return ""
    balance = float(pop["load_balance"])
    explained = float(pop["useful_max"] - pop["useful_mean"])
    unexplained = float(pop["ideal_elapsed"] - pop["useful_max"])
    if balance >= BALANCED:
        return (f"Ranks that compute more wait less (correlation {r:.2f}), but compute is balanced (load balance "
                f"{balance:.2f}, measured): the compute differences ({fmt.seconds(explained)}, max - mean) cannot "
                "explain this waiting; it is not load imbalance (see the finding on unexplained waits).")
    text = (f"Ranks that compute more wait less (correlation {r:.2f}): load imbalance (load balance {balance:.2f}, "
            f"measured) accounts for {fmt.seconds(explained)} per rank of the run's waiting (max - mean compute)")
    if unexplained > 0.25 * max(explained, 1e-300):
        text += f"; {fmt.seconds(unexplained)} more is not explained by it (see the finding on unexplained waits)"
    return text + "."


def _varies(values: np.ndarray, ok: np.ndarray) -> bool:
    """Whether ``values`` differ over the ranks in ``ok`` (standard deviation above 0)."""
    return float(np.nanstd(np.where(ok, values, np.nan))) != 0


def _imbalance_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Compute imbalance: load balance, slow ranks (as ranges) and their excess over the mean."""
    stats = stats_over_ranks(context.compute, "s")
    columns = {name: stats[name].values for name in stats.data_vars}
    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        s = {name: float(values[i]) for name, values in columns.items()}
        if not np.isfinite(s["imbalance_time"]) or s["imbalance_time"] <= 0 or s["load_balance"] >= BALANCED:
            continue
        lead = (f"Load balance {s['load_balance']:.2f} (measured): rank {int(s['rank_of_max'])} computes "
                f"{fmt.seconds(s['max'])} against a mean of {fmt.seconds(s['mean'])} "
                f"({fmt.percent(s['max_over_mean'] - 1)} above).")
        details = "Load balance is the mean over the maximum of compute time per rank."
        slow = slow_ranks(ds, run, threshold=SLOW_RANK, values=context.compute)
        if len(slow) and set(slow["rank"]) != {int(s["rank_of_max"])}:
            details = fmt.sentences(details, _slow_rank_text(slow, int(context.ranks[run])))
        rows.append(_row(run, "load_imbalance", "Compute load imbalance", lead, details, s["imbalance_time"]))
    return rows


def _slow_rank_text(slow: pd.DataFrame, n_ranks: int) -> str:
    """Sentence naming the slow ranks (``slow_ranks`` table) of a run of ``n_ranks`` ranks."""
    low, high = fmt.percent(slow["excess"].min()), fmt.percent(slow["excess"].max())
    spread = high if low == high else f"{low[:-1]}-{high}"
    return (f"Compute time of {fmt.ranks(slow['rank'])} is {spread} above the mean "
            f"({len(slow)} of {fmt.plural(n_ranks, 'rank')}).")


def _node_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Nodes whose every rank is slow (a slow node rather than slow ranks)."""
    nodes = by_node(ds, values=context.compute)
    beyond_trend = pd.concat([_floor_beyond_trend(one) for _, one in nodes.groupby("run", sort=False)]
                             ) if len(nodes) else pd.Series(dtype=np.float64)
    scatter = pd.concat([_scatter_without_each(one) for _, one in beyond_trend.groupby(nodes["run"], sort=False)]
                        ) if len(nodes) else pd.Series(dtype=np.float64)
    slow = nodes[(nodes["floor_excess"] > SLOW_NODE) & (beyond_trend > SLOW_NODE) & (nodes["n_ranks"] > 1)
                 & (beyond_trend > NODE_SCATTER * scatter.reindex(nodes.index))]
    rows = []
    for rec in slow.itertuples():
        ranks = fmt.ranks(range(int(rec.first_rank), int(rec.last_rank) + 1))
        lead = (f"Node {int(rec.node)} ({ranks}) is uniformly slow: even its fastest rank computes "
                f"{fmt.percent(rec.floor_excess)} more than the typical node's fastest.")
        details = (f"Its mean compute is {fmt.percent(rec.excess, signed=True)} against the mean. Check that node "
                   "(clock, memory, OS noise).")
        rows.append(_row(str(rec.run), "slow_node", f"Slow node {int(rec.node)}", lead, details,
                         rec.max - rec.max / (1 + rec.floor_excess)))
    return rows


def _scatter_without_each(beyond: pd.Series) -> pd.Series:
    """The scatter of the other nodes about the line, for each node of a run: 1.4826 x the median of the
    other nodes' absolute ``_floor_beyond_trend`` (the standard deviation, were the scatter normal and
    centred on the line); 0 below 2 other nodes or when the others sit on the line, infinite excess
    left as it is. Leaving the node out keeps a slow node among few from widening its own yardstick.
    """
    size = beyond.size
    ordered = np.sort(np.abs(beyond.to_numpy(np.float64)))
    place = np.empty(size, np.intp)
    place[np.argsort(np.abs(beyond.to_numpy(np.float64)), kind="stable")] = np.arange(size)
    others = size - 1
    if others < 2 or not np.isfinite(ordered).all():
        return pd.Series(0.0, index=beyond.index)

    def kth(k: int) -> np.ndarray:  # the k-th smallest of the others, for each node left out
        return ordered[np.where(k < place, k, k + 1)]

    middle = kth(others // 2) if others % 2 else (kth(others // 2 - 1) + kth(others // 2)) / 2
    return pd.Series(1.4826 * middle, index=beyond.index)


def _floor_beyond_trend(nodes: pd.DataFrame) -> pd.Series:
    """Each node's fastest rank against a straight line through the nodes' fastest ranks (Theil-Sen:
    the median slope over pairs of nodes, so that one slow node does not tilt it), as a share of the
    line. Compute that grows with the rank number (a gradient) lifts every later node by the same step
    and stays on the line; a slow node stands off it. Below 4 nodes a line cannot be told from a slow
    node: the floors are returned as they are (infinite excess: no test)."""
    x, floor = nodes["node"].to_numpy(np.float64), nodes["min"].to_numpy(np.float64)
    if x.size < MIN_NODES_FOR_TREND:
        return pd.Series(np.inf, index=nodes.index)
    rng = np.random.default_rng(0)  # at most TREND_PAIRS pairs of nodes, drawn the same way every time
    i, j = (np.triu_indices(x.size, 1) if x.size * (x.size - 1) // 2 <= TREND_PAIRS
            else rng.integers(0, x.size, (2, TREND_PAIRS)))
    keep = x[i] != x[j]
    slope = float(np.median((floor[j[keep]] - floor[i[keep]]) / (x[j[keep]] - x[i[keep]])))
    line = float(np.median(floor - slope * x)) + slope * x
    return pd.Series(floor / line - 1.0, index=nodes.index)


def _transfer_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Transfer time: transfer efficiency, and the most a perfect interconnect could remove."""
    transfer = context.parts["time"].sel(kind="transfer").values
    ranks = context.parts["rank"].values
    pop = context.pop
    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        t = transfer[i]
        most = float(np.fmax.reduce(t))
        if not np.isfinite(most) or most <= 0:
            continue
        efficiency, how = float(pop["transfer_efficiency"][i]), _evidence(pop, i, "transfer_efficiency")
        lost = float(pop["elapsed"][i] - pop["ideal_elapsed"][i])
        seconds = max(lost if np.isfinite(lost) else float(np.fmin.reduce(t)), 0.0)
        details = (f"Moving data (including MPI overhead) takes {fmt.seconds(float(np.nanmean(t)))} per rank on "
                   f"average, at most {fmt.seconds(most)} on rank {int(ranks[np.nanargmax(t)])}.")
        caveats: tuple[str, ...] = ("estimated",) if how == "modelled" else ()
        nc = context.no_core[i]
        off = nc.transfer_and_wait(seconds, 0.0)[0] if nc is not None else 0.0
        if off > 0:
            details = fmt.sentences(details, f"The transfers include {fmt.seconds(off)} per rank of ranks waiting for "
                                    "a core (see the finding on time without a core), left out here.")
            seconds -= off
            caveats = (*caveats, "no_core")
            if seconds <= 0.01 * float(pop["elapsed"][i]):
                continue
        if context.hosts[i] == 1:
            lead = (f"Transfer efficiency {efficiency:.2f} ({how}): the run would be about {fmt.seconds(seconds)} "
                    "shorter if moving data between its ranks cost nothing.")
            rows.append(_row(run, "transfer", "Shared-memory transfer time", lead,
                             fmt.sentences(details, _ONE_HOST) + _no_cpu(context, nc, i), seconds, caveats))
            continue
        lead = (f"Transfer efficiency {efficiency:.2f} ({how}): the run would be about "
                f"{fmt.seconds(seconds)} shorter on an ideal network.")
        rows.append(_row(run, "transfer", "Network transfer time", lead, details, seconds,
                         ("perfect_network", *caveats)))
    return rows


def _evidence(pop: xr.Dataset, i: int, name: str) -> str:
    """``measured`` / ``modelled`` / ``unavailable`` of efficiency ``name`` in run ``i`` (``CAVEATS['estimated']``
    says what modelled means)."""
    return str(pop["evidence"].isel(run=i).sel(efficiency=name).item())


def _hierarchy_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Per run, the POP hierarchy and its largest loss: the first finding of every run."""
    pop = context.pop
    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        v = {name: float(pop[name][i]) for name in ("load_balance", "communication_efficiency",
                                                     "serialisation_efficiency", "transfer_efficiency",
                                                     "parallel_efficiency")}
        elapsed, mean, top, ideal = (float(pop[n][i]) for n in ("elapsed", "useful_mean", "useful_max",
                                                                 "ideal_elapsed"))
        if not np.isfinite(v["parallel_efficiency"]):
            continue
        lost = elapsed * (1 - v["parallel_efficiency"])
        efficiency = f"Parallel efficiency {v['parallel_efficiency']:.2f}"
        not_compute = f"{fmt.seconds(lost)} of {fmt.seconds(elapsed)} per rank is not compute"
        if not np.isfinite(v["load_balance"]):
            note = str(pop["note"].isel(run=i).sel(efficiency="load_balance").item())
            lead = f"{efficiency} (measured): {not_compute}; the split of the loss is unavailable."
            details = (f"Parallel efficiency is {_stated(pop, i)}. Load balance is unavailable: {note}. A verbose "
                       "report (per-rank times) would give it.")
            rows.append(_row(run, "efficiency", efficiency, lead, details, lost))
            continue
        network = _evidence(pop, i, "serialisation_efficiency")
        losses = {name: max(seconds, 0.0) for name, seconds in
                  {"load imbalance": top - mean, "unexplained waits": ideal - top, "transfer": elapsed - ideal}.items()}
        details = (f"{efficiency} = load balance {v['load_balance']:.2f} (measured) x communication efficiency "
                   f"{v['communication_efficiency']:.2f} (measured); communication efficiency = serialisation "
                   f"{v['serialisation_efficiency']:.2f} x transfer {v['transfer_efficiency']:.2f} ({network}). "
                   f"Of {fmt.seconds(lost)} per rank not spent computing (elapsed {fmt.seconds(elapsed)}, mean compute "
                   f"{fmt.seconds(mean)}): " + ", ".join(f"{name} {fmt.seconds(seconds)}"
                                                        for name, seconds in losses.items()) + ".")
        caveats: tuple[str, ...] = ("estimated",) if network == "modelled" else ()
        nc = context.no_core[i]
        if nc is not None and nc.applies:
            off_transfer, off_wait = nc.transfer_and_wait(losses["transfer"], losses["unexplained waits"])
            losses = {"load imbalance": losses["load imbalance"],
                      "unexplained waits": losses["unexplained waits"] - off_wait,
                      "transfer": losses["transfer"] - off_transfer, "no core": nc.seconds}
            lost += nc.compute
            details = fmt.sentences(details, _no_core_split(nc), (
                f"Leaving the time without a core out, transfer is {fmt.seconds(losses['transfer'])} and "
                f"unexplained waits {fmt.seconds(losses['unexplained waits'])}; counting the compute's, "
                f"{fmt.seconds(lost)} per rank is not compute on a CPU."))
            caveats = (*caveats, "no_core")
        largest = max(losses, key=lambda k: losses[k])
        waiting = f"{fmt.seconds(losses['unexplained waits'])} of waiting"
        one_host = bool(context.hosts[i] == 1)
        if largest == "no core" and nc is not None:
            cause = ("ranks sharing cores (oversubscription: " if nc.oversubscribed else
                     "ranks without a core (interference: ") + _no_core_cause(nc) + ")"
            title = f"Largest loss: {cause}"
            lead = (f"{efficiency} (wall-clock compute): {fmt.seconds(lost)} of {fmt.seconds(elapsed)} per rank is not "
                    f"compute on a CPU; the largest loss is waiting for a core, {fmt.seconds(nc.seconds)} per rank.")
        elif v["parallel_efficiency"] >= EFFICIENT and not (nc is not None and nc.applies):
            title = f"Efficient: parallel efficiency {v['parallel_efficiency']:.2f}"
            lead = f"{efficiency}: {not_compute}, no loss worth pursuing."
            details += (f" Less than {fmt.percent(1 - EFFICIENT)} of the elapsed time is lost; compute is "
                        f"{'balanced' if v['load_balance'] >= BALANCED else 'nearly balanced'}.")
        elif largest == "load imbalance":
            title = f"Largest loss: load imbalance (load balance {v['load_balance']:.2f})"
            lead = (f"{efficiency}: {not_compute}; the largest loss is load imbalance, "
                    f"{fmt.seconds(losses[largest])}.")
            details = fmt.sentences(details, _largest_imbalance(ds, context, run))
        elif largest == "unexplained waits" and (phases := _always_last(context, i)):
            named = ", ".join(f"rank {rank} at {call}" for call, rank, _ in phases)
            title = f"Largest loss: imbalance between phases (last at every call: {named})"
            lead = (f"{efficiency}: {not_compute}; the largest loss, {waiting}, comes from ranks arriving last at "
                    "collectives.")
            details += (f" The compute totals do not explain this waiting (load balance {v['load_balance']:.2f}), "
                        "but the measured collective waits do: "
                        + "; ".join(f"at {call} every rank but {rank} waits ({fmt.seconds(wait)} per rank on average) "
                                    f"and rank {rank} almost never does, so it arrives last every time"
                                    for call, rank, wait in phases)
                        + ". The compute before each collective is imbalanced in a different way, which the per-rank "
                        "totals average out: balance each phase, not the totals.")
        elif largest == "unexplained waits" and (causes := _trace_causes(ds, context, i)):
            name, _ = max(causes.items(), key=lambda kv: kv[1])
            title = (f"Largest loss: waits the compute imbalance does not explain (serialisation efficiency "
                     f"{v['serialisation_efficiency']:.2f}); the trace shows {name}")
            lead = f"{efficiency}: {not_compute}; the largest loss, {waiting}, is mostly {name}."
            details += (f" This waiting is not load imbalance (compute load balance {v['load_balance']:.2f}). The "
                        "trace tells its causes apart, measured phase by phase: "
                        + ", ".join(f"{cause} {fmt.seconds(seconds)}" for cause, seconds in causes.items())
                        + " (see those findings).")
        elif largest == "unexplained waits":
            title = (f"Largest loss: waits the compute imbalance does not explain (serialisation efficiency "
                     f"{v['serialisation_efficiency']:.2f}); a profile cannot tell their cause")
            lead = (f"{efficiency}: {not_compute}; the largest loss, {waiting}, is not load imbalance and a profile "
                    "cannot tell its cause.")
            details += f" Compute is {'balanced' if v['load_balance'] >= BALANCED else 'imbalanced'} (load balance " \
                       f"{v['load_balance']:.2f})."
            caveats = ("cannot_tell", *caveats)
        elif (rate := _transfer_rate(context, i)) is not None and rate[0] < SLOW_TRANSFER:
            title = (f"Largest loss: MPI transfers far too slow for the data moved (transfer efficiency "
                     f"{v['transfer_efficiency']:.2f}); " + ("ranks sharing cores or interference, not the network"
                                                              if nc is None else "not the network"))
            lead = (f"{efficiency}: {not_compute}; the largest loss is transfer at only {fmt.byterate(rate[0])}, too "
                    "slow for any network.")
            details += (f" Transfers take {fmt.seconds(rate[2])} per rank on average to move {fmt.nbytes(rate[1])} "
                        f"({fmt.byterate(rate[0])}, {fmt.seconds(rate[3])} per call): no network or shared memory is "
                        "that slow. Ranks that are not running while their partners wait for them look like this: "
                        "more ranks than cores (check ranks per node against cores per node) or other load on the "
                        "nodes. " + ("A profile cannot tell which; `top` on a node or fewer ranks per node can."
                                     if nc is None else f"Yet waiting for a core cost only {fmt.seconds(nc.seconds)} "
                                     f"per rank (run delay {fmt.seconds(nc.delay)}, measured): not that either; a "
                                     "trace of the calls shows where their time goes.")
                        + _no_cpu(context, nc, i))
        elif one_host:
            title = f"Largest loss: shared-memory transfer (transfer efficiency {v['transfer_efficiency']:.2f})"
            lead = f"{efficiency}: {not_compute}; the largest loss is moving data, {fmt.seconds(losses[largest])}."
            details += f" {_ONE_HOST} Fewer or larger messages would help.{_no_cpu(context, nc, i)}"
        else:
            title = f"Largest loss: transfer (transfer efficiency {v['transfer_efficiency']:.2f})"
            lead = f"{efficiency}: {not_compute}; the largest loss is moving data, {fmt.seconds(losses[largest])}."
            details += (" A faster network, fewer or larger messages, or a placement that keeps partners on a node "
                        "would help.")
            caveats = ("perfect_network", *caveats)
        rows.append(_row(run, "efficiency", title, lead, details, lost, caveats))
    return rows


_ONE_HOST = "Every rank ran on one node: its transfers go through shared memory, not a network."


def _always_last(context: _Context, i: int) -> list[tuple[str, int, float]]:
    """Collectives with measured waits at which one rank (almost) never waits: it was last at every call.

    Returns (call, rank, mean wait of the other ranks [s]) for each such collective of run ``i``
    whose waiting matters (mean over ranks above 1 % of elapsed).
    """
    split = context.split.isel(run=i)
    elapsed = float(context.pop["elapsed"][i])
    found = []
    for j, call in enumerate(map(str, split["call"].values)):
        if str(split["wait_kind"].values[j]) != "wait_collective" or bool(split["estimated"].values[j]):
            continue
        wait = split["time"].sel(part="wait").values[:, j]
        ok = ~np.isnan(wait)
        if ok.sum() < 3 or not np.nanmean(wait) > 0.01 * elapsed:
            continue
        ranks = split["rank"].values[ok]
        order = np.argsort(wait[ok])
        others = np.delete(wait[ok], order[0])
        if wait[ok][order[0]] < ALWAYS_LAST * float(np.min(others)):
            found.append((call, int(ranks[order[0]]), float(np.mean(others))))
    return found


def _transfer_rate(context: _Context, i: int) -> tuple[float, float, float, float] | None:
    """Bytes moved per second of transfer time [B/s], bytes per rank [B], transfer per rank [s], per call [s]."""
    transfer = float(np.nanmean(context.parts["time"].sel(kind="transfer").values[i]))
    moved = [context.moved[i, :, 0], context.moved[i, :, 1]]
    calls = context.transfer_calls[i]
    exists = ~np.isnan(context.parts["total"].values[i])
    per_rank = float(np.mean((moved[0] + moved[1])[exists])) if exists.any() else np.nan
    per_call = transfer / float(np.mean(calls[exists])) if exists.any() and np.mean(calls[exists]) > 0 else np.nan
    if not (transfer > 0 and per_rank > 0):
        return None
    return per_rank / transfer, per_rank, transfer, per_call


def _stated(pop: xr.Dataset, i: int) -> str:
    return str(pop["note"].isel(run=i).sel(efficiency="parallel_efficiency").item())


def _largest_imbalance(ds: xr.Dataset, context: _Context, run: str) -> str:
    """Sentence naming the busiest and the slow ranks of ``run`` (the load-imbalance loss)."""
    compute = context.compute.sel(run=run)
    busiest = int(compute["rank"].values[int(np.nanargmax(compute.values))])
    slow = slow_ranks(ds, run, threshold=SLOW_RANK, values=context.compute)
    return fmt.sentences(f"Rank {busiest} computes most.",
                         _slow_rank_text(slow, int(context.ranks[run])) if len(slow) else "")


def _unexplained_wait_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Waits beyond what the compute imbalance explains (serialisation efficiency), never called load imbalance."""
    pop = context.pop
    parts = context.parts["time"]
    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        ideal, top, elapsed = (float(pop[n][i]) for n in ("ideal_elapsed", "useful_max", "elapsed"))
        seconds = ideal - top
        if not np.isfinite(seconds) or seconds <= 0.01 * elapsed:
            continue
        compute = context.compute.isel(run=i)
        busiest = int(compute["rank"].values[int(np.nanargmax(compute.values))])
        own = parts.isel(run=i).sel(rank=busiest)
        waited = float(own.sel(kind=list(WAIT_KINDS)).sum())
        startup = float(context.startup[i][compute["rank"].values == busiest][0])
        other = max(float(own.sel(kind=["io", "other"]).sum()) - startup, 0.0)
        how = _evidence(pop, i, "serialisation_efficiency")
        lead = (f"Serialisation efficiency {float(pop['serialisation_efficiency'][i]):.2f} ({how}): "
                f"{fmt.seconds(seconds)} per rank of waiting is not load imbalance.")
        ideal_case = "With instantaneous transfers" if context.hosts[i] == 1 else "On an ideal network"
        details = (f"{ideal_case} the run would still take {fmt.seconds(ideal)} while no rank computes more "
                   f"than {fmt.seconds(top)}; rank {busiest}, which computes most, still waits {fmt.seconds(waited)} "
                   f"and spends {fmt.seconds(other)} in I/O and other calls (start-up left out). Load imbalance is "
                   f"max - mean compute, {fmt.seconds(top - float(pop['useful_mean'][i]))}.")
        nc = context.no_core[i]
        off = nc.transfer_and_wait(float(pop["elapsed"][i]) - ideal, seconds)[1] if nc is not None else 0.0
        if off > 0:
            details += (f" Up to {fmt.seconds(off)} per rank of it is ranks waiting for partners that had no core "
                        "in their compute (see the finding on time without a core), left out here.")
            seconds -= off
            if seconds <= 0.01 * elapsed:
                continue
        elif nc is not None:
            details += (f" The ranks had their cores when it mattered: waiting for one cost them "
                        f"{fmt.seconds(nc.seconds)} per rank (run delay {fmt.seconds(nc.delay)}, measured), so ranks "
                        "sharing cores are not the cause.")
        else:
            details += _no_cpu(context, nc, i)
        causes = _trace_causes(ds, context, i)
        caveats: tuple[str, ...] = () if causes else ("cannot_tell",)
        if causes:
            details += (" The trace tells the causes apart: "
                        + ", ".join(f"{cause} {fmt.seconds(s)}" for cause, s in causes.items())
                        + " (see those findings).")
        if how == "modelled":
            caveats = (*caveats, "estimated")
        rows.append(_row(run, "unexplained_wait", "Waits the compute imbalance does not explain", lead, details,
                         seconds, caveats))
    return rows


def _cpu_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Time the ranks spent without a core (run delay above ``NO_CORE`` of elapsed): oversubscription when a node
    has more ranks than cores (``cpu.cpu_usage``), else interference."""
    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        nc = context.no_core[i]
        if nc is None or not nc.applies:
            continue
        ran = f"{fmt.seconds(nc.on_cpu)} of {fmt.seconds(nc.region)} per rank ran on a CPU"
        if nc.oversubscribed:
            title = f"Oversubscription: {fmt.plural(nc.on_host, 'rank')} on a node with {_cores_text(nc.cores)}"
            lead = f"{fmt.ranks(nc.shared).capitalize()} shared {_cores_text(nc.cores)}: {_no_core_cause(nc)}; {ran}."
            advice = (f"Run at most {fmt.plural(max(int(nc.cores), 1), 'rank')} per node (one per core), or spread the "
                      "ranks over more nodes; the transfer and wait findings leave this time out.")
            sharing = nc.region * (1 - nc.cores / nc.on_host)
            if nc.delay > OTHER_LOAD * sharing:
                advice = (f"Busy ranks sharing the cores so would wait at most {fmt.seconds(sharing)} per rank: "
                          f"other load took the cores too. {advice}")
        else:
            title = "Interference: ranks without a core"
            lead = (f"The ranks waited {fmt.seconds(nc.delay)} per rank for a core with no more ranks than cores on "
                    f"any node: other load took them; {ran}.")
            advice = ("Another job, daemons or OS noise used the cores: check the nodes (top), bind the ranks to cores "
                      "and keep those cores free of other work; the transfer and wait findings leave this time out.")
        rows.append(_row(run, "cpu", title, lead, fmt.sentences(_no_core_split(nc), advice), nc.seconds, ("no_core",)))
    return rows


def _no_cpu(context: _Context, nc: _NoCore | None, i: int) -> str:
    """`` CPU was not measured...`` where run ``i`` has no CPU measurement (``nc``) and its host names show a
    node with several ranks, which might have shared its cores; else ""."""
    if nc is not None or not 0 < context.hosts[i] < context.ranks.iloc[i]:
        return ""
    return (" CPU was not measured: whether ranks sharing a node's cores caused it is unknown; `perfkit collect` "
            "measures each rank's time without a core.")


def _share_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """MPI share of the time and which calls dominate it (Allreduce/Bcast dominance)."""
    rows = []
    for run, calls in context.mpi.groupby("run", sort=False):
        top = calls[calls["time_share"] > 0].head(2)
        mpi_time = calls["time"].sum() / context.ranks[run]
        lead = f"MPI takes {fmt.percent(calls['elapsed_share'].sum())} of the time, {fmt.seconds(mpi_time)} per rank."
        details = ""
        if len(top):
            names = " and ".join(f"{c} ({fmt.percent(s)})" for c, s in zip(top["call"], top["time_share"]))
            verb = "accounts" if len(top) == 1 else "account"
            details = f"{names} {verb} for {fmt.percent(top['time_share'].sum())} of it."
        if top["call"].isin(["MPI_Allreduce", "MPI_Bcast"]).any():
            details += " Collective time like this is usually waiting for the slowest rank; see the wait findings."
        rows.append(_row(str(run), "mpi_share", "Where MPI time goes", lead, details, mpi_time))
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
        lead = (f"{fmt.percent(small)} of the {fmt.count(table['messages'].sum())} messages are below 1 KiB: "
                "latency, not bandwidth, sets their cost.")
        details = (f"{fmt.seconds(table['small_time'].sum() / context.ranks[run])} per rank is spent in calls with "
                   "small messages, waits included.")
        transfer = float(context.parts["time"].sel(run=run, kind="transfer").mean())
        rows.append(_row(str(run), "small_messages", "Small messages", lead, details, transfer * small))
    return rows


def _trend_findings(ds: xr.Dataset, mpi: pd.DataFrame, elapsed: pd.Series) -> list[dict[str, Any]]:
    """Communication share rising with the process count across runs (``mpi``: ``mpi_share`` of every run)."""
    nprocs = ds["nprocs"].to_pandas()
    if nprocs.nunique() < 2:
        return []
    table = mpi.groupby("run")["elapsed_share"].sum()
    runs = pd.DataFrame({"nprocs": nprocs, "share": table}).dropna()
    if runs["nprocs"].nunique() < 2:
        return []
    per_n = runs.groupby("nprocs")["share"].mean().sort_index()
    if per_n.iloc[-1] <= per_n.iloc[0] + 0.05:
        return []
    last = runs[runs["nprocs"] == per_n.index[-1]].index[0]
    steps = ", ".join(f"{fmt.percent(s)} at {fmt.count(n)}" for n, s in per_n.items())
    lead = (f"The MPI share of the time rises with scale, from {fmt.percent(per_n.iloc[0])} at "
            f"{fmt.plural(per_n.index[0], 'rank')} to {fmt.percent(per_n.iloc[-1])} at "
            f"{fmt.plural(per_n.index[-1], 'rank')}.")
    details = (f"Per process count: {steps} ranks. Communication and waiting, not compute, limit strong scaling "
               "beyond the smaller runs.")
    seconds = float(per_n.iloc[-1] - per_n.iloc[0]) * float(elapsed[last])
    return [_row(str(last), "scaling", "Communication share rises with scale", lead, details, seconds)]


def _trace_causes(ds: xr.Dataset, context: _Context, i: int) -> dict[str, float]:
    """For a traced run ``i``, its waits beyond load imbalance split by cause [s]: phase-by-phase compute
    excess beyond the totals' max - mean (``dynamic imbalance`` when the late rank changes between
    phases of a call, else ``imbalance between phases``) and ``serialisation`` (the rest); empty for
    a run without phases.
    """
    run = str(ds["run"].values[i])
    if not has_phases(ds, run):
        return {}
    pop = context.pop
    compute = context.compute.isel(run=i).values
    unexplained = max(float(pop["ideal_elapsed"][i] - pop["useful_max"][i]), 0.0)
    beyond = min(max(phase_excess(ds, run) - float(np.nanmax(compute) - np.nanmean(compute)), 0.0), unexplained)
    dynamic = any(not p.static and p.excess.sum() > 0 for p in call_phases(ds, run))
    name = "dynamic imbalance" if dynamic else "imbalance between phases"
    return {name: beyond, "serialisation": unexplained - beyond}


def _trace_findings(ds: xr.Dataset, context: _Context, full: xr.Dataset) -> list[dict[str, Any]]:
    """Findings a trace's phases and wait states make possible (``perfkit.analysis.phases``): the late
    rank of each phase (static or dynamic imbalance, a rank late before a collective), serialisation
    and late receivers. ``full`` is the Dataset with its traffic (to name the chain of senders).
    """
    rows: list[dict[str, Any]] = []
    if "wait_states" not in ds:
        return rows
    for i, run in enumerate(map(str, ds["run"].values)):
        floor = 0.01 * float(context.elapsed[run])
        nc = context.no_core[i]
        off_compute = nc.compute if nc is not None and nc.applies else 0.0
        rows += _late_receiver_findings(ds, run, floor, off_compute)
        if not has_phases(ds, run):
            continue
        compute = context.compute.isel(run=i).values
        static = float(np.nanmax(compute) - np.nanmean(compute))
        functions = set(map(str, ds["function"].values))
        for phases in call_phases(ds, run):
            total = float(phases.excess.sum())
            if total <= floor:
                continue
            rank, share = phases.mode
            n = phases.late.size
            late_in = round(share * n)
            per = total / n
            if phases.static and f"b_{phases.call}" in functions:
                lead = (f"At {phases.call} the other ranks wait for rank {rank}: it computes most before the call in "
                        f"{late_in} of {fmt.plural(n, 'call')}, {fmt.seconds(total)} over the run.")
                details = (f"It computes {fmt.seconds(per)} more than the mean each time (measured from the trace). "
                           f"Balance the compute before {phases.call} (rank {rank}'s share).")
                rows.append(_row(run, "collective_imbalance", f"{phases.call}: rank {rank} late before the collective",
                                 lead, details, total))
            elif phases.static:
                lead = (f"Rank {rank} computes most in {late_in} of the {fmt.plural(n, 'phase')} ending in "
                        f"{phases.call}, {fmt.seconds(per)} more than the mean each (measured from the trace).")
                details = "The same rank is late every time, so balancing the totals balances every phase."
                rows.append(_row(run, "static_imbalance", f"Static imbalance: rank {rank} late in every phase",
                                 lead, details, total))
            elif (ranks := np.unique(phases.late[phases.late >= 0])).size > 1 and total - static > floor:
                lead = (f"At {phases.call} a different rank is late from phase to phase ({ranks.size} ranks take "
                        f"turns), {fmt.seconds(total)} over the run; the per-rank totals show only "
                        f"{fmt.seconds(static)}.")
                details = (f"Late ranks: {late_rank_list(phases)}. Each phase's late rank computes {fmt.seconds(per)} "
                           "more than the mean on average (measured from the trace); the totals show max - mean "
                           "compute only, so balancing them would not help: balance each phase (e.g. dynamic load "
                           "balancing).")
                if off_compute > 0:
                    details += (f" The compute includes {fmt.seconds(off_compute)} per rank of waiting for a core (see "
                                "the finding on time without a core), left out here: a rank the scheduler took off "
                                "its core is late too.")
                rows.append(_row(run, "dynamic_imbalance", f"Dynamic imbalance at {phases.call}", lead, details,
                                 max(total - static - off_compute, 0.0)))
        serial = _trace_causes(ds, context, i).get("serialisation", 0.0)
        late_sender = float(np.nanmean(ds["wait_states"].sel(run=run, state="late_sender").values))
        if serial > floor and late_sender > 0:
            chain = send_chain(full, run)
            how = f"Messages flow {' -> '.join(map(str, chain))}." if len(chain) > 2 else ""
            lead = (f"Ranks wait in turn, each for a sender that was itself waiting: {fmt.seconds(serial)} of waiting "
                    "that is neither load imbalance nor any phase's compute excess.")
            details = fmt.sentences(f"This is a chain of late senders (late-sender wait {fmt.seconds(late_sender)} per "
                                    "rank, measured from the trace).", how, "Overlap the work: let ranks compute while "
                                    "others wait (pipelining, wavefront reordering).")
            rows.append(_row(run, "serialisation", "Serialisation: ranks wait in turn", lead, details, serial))
    return rows


def _late_receiver_findings(ds: xr.Dataset, run: str, floor: float, off_core: float) -> list[dict[str, Any]]:
    """Blocking sends that waited for their receiver to post the receive (Scalasca's late receiver), less
    ``off_core``, the time per rank without a core in compute [s] (a receiver without a core posts late)."""
    waits = ds["wait_states"].sel(run=run, state="late_receiver").to_pandas().dropna()
    mean = float(waits.mean()) if len(waits) else 0.0
    if not mean > floor:
        return []
    ranks = waits.index[waits > 0.1 * float(waits.max())]
    verb = "waits" if len(ranks) == 1 else "wait"
    lead = (f"Blocking sends of {fmt.ranks(ranks)} {verb} for their receivers to post the receive, "
            f"{fmt.seconds(mean)} per rank (measured from the trace).")
    details = (f"At most {fmt.seconds(float(waits.max()))}, on rank {int(waits.idxmax())} (late receiver): the "
               "library did not buffer the message. Post the receives earlier or send with MPI_Isend.")
    left_out = min(off_core, mean)
    if left_out > 0:
        details += (f" Up to {fmt.seconds(left_out)} per rank of it is receivers waiting for a core in their compute "
                    "(see the finding on time without a core), left out here: a receiver without a core posts late.")
    return [_row(run, "late_receiver", "Late receivers", lead, details, mean - left_out)]


#: The finders run on each chunk of runs, in the order their findings are listed before sorting.
_FINDERS = (_hierarchy_findings, _cpu_findings, _unexplained_wait_findings, _wait_findings, _imbalance_findings,
            _node_findings, _transfer_findings, _share_findings, _size_findings)
