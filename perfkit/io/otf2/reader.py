"""OTF2 traces (Score-P, the perfkit collector) -> the canonical Dataset.

Per rank and MPI function: exclusive time [s], calls, bytes and messages sent and received; the
non-MPI remainder is ``Compute``. Wait states (``perfkit.io.otf2.waits``) become their own
function rows, taken out of their call's time: ``w_MPI_Xxx`` late sender (kind
``wait_late_sender``), ``r_MPI_Xxx`` late receiver (``wait_late_receiver``) and ``b_MPI_Xxx``
collective waits (``wait_collective``); the rest of the call stays ``transfer``. ``traffic`` is
exact from the message records, in world ranks; ``sizes`` histograms messages by size (power-of-two
bins, labelled by their upper edge [B]); ``wait_states`` (run, rank, state) keeps Scalasca's finer
states [s], with the wrong-order part of late sender; ``replay_elapsed`` (run) the runtime [s] on an
ideal network (``perfkit.io.otf2.replay``), from which ``perfkit.pop_metrics`` takes serialisation
and transfer efficiency; ``replay_network`` (run, transfer_scale) the runtime [s] replayed with every
call's own time scaled (1 as measured, 1/2, 1/4, 1/8 for networks 2, 4, 8 times faster, 0 ideal) and
``replay_balanced`` (run) with every rank computing the mean, which ``perfkit.whatif`` answers from.
``timeline`` (run, rank, time_bin, timeline_kind) holds the seconds of each kind per rank in each of
``timeline_bins`` equal time bins (``perfkit.io.otf2.timeline``); ``phases`` (run, phase, phase_stat)
compares the ranks' compute between synchronising calls (``perfkit.io.otf2.phases``). A trace with a CPU
time metric at every Enter and Leave (``cpu_time``, as ``perfkit collect --trace`` writes it) adds the
metric ``cpu_time`` [s]: per call its CPU time (all on the call's row, NaN on its wait rows, as the
collector's profile has it), ``Compute`` the rest; NaN for a rank whose metric cannot be read, with a
warning naming its events file and the event.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from perfkit.errors import PerfkitFormatError
from perfkit.io.otf2.definitions import EXPECTED, Definitions, function_of, read_definitions, region_kinds
from perfkit.io.otf2.events import RankEvents, events_member, stream_ranks
from perfkit.io.otf2.heap import give_back
from perfkit.io.otf2.phases import STATS as PHASE_STATS
from perfkit.io.otf2.phases import phase_table
from perfkit.io.otf2.replay import TRANSFER_SCALES, balanced, replay_runtimes
from perfkit.io.otf2.timeline import DEFAULT_BINS, NONE, Bins
from perfkit.io.otf2.waits import BLOCKING_SENDS, STATES, Records, Waits, compute_waits
from perfkit.model import (
    COMPUTE,
    CPU_TIME,
    KINDS,
    METRICS,
    TRAFFIC_QUANTITIES,
    default_kind,
    dense_traffic,
    make_run,
    sorted_coo,
)

READER = "perfkit.io.otf2"
#: Wait rows: (prefix, kind) per wait of ``Waits``.
WAIT_ROWS = {"late_sender": ("w_", "wait_late_sender"), "late_receiver": ("r_", "wait_late_receiver"),
             "collective": ("b_", "wait_collective")}
ANCHOR_MAGIC = b"OTF2"
#: Messages per pass of the analyses after reading (their temporaries are a few arrays of this length).
CHUNK = 1 << 18
#: Bytes of the ranks' tables freed between two returns of freed memory to the system (``heap.give_back``).
TRIM_BYTES = 32 << 20


def sniff(path: Path, head: bytes) -> bool:
    """True for an OTF2 anchor file, or a folder holding exactly one."""
    if path.is_dir():
        return len(list(path.glob("*.otf2"))) == 1
    return len(head) >= 6 and head[1:2] in (b"B", b"L") and head[2:6] == ANCHOR_MAGIC


def read(path: str | PathLike, *, timeline_bins: int = DEFAULT_BINS, **run_metadata: Any) -> xr.Dataset:
    """Read one OTF2 trace (its anchor file, or the experiment folder) into a one-run Dataset.

    ``timeline_bins``: number of equal time bins of the ``timeline`` variable (0: no timeline).
    """
    if int(timeline_bins) < 0:
        raise ValueError(f"timeline_bins must be >= 0, got {timeline_bins}")
    anchor = _anchor(Path(path))
    import otf2

    try:
        trace = otf2.reader.Reader(str(anchor))
    except Exception as exc:  # the library raises its own error types, or TraceReaderError
        raise PerfkitFormatError(anchor, None, f"cannot read the anchor or the global definitions "
                                 f"{anchor.stem}.def ({type(exc).__name__}: {exc}); expected {EXPECTED}") from exc
    try:
        defs = read_definitions(anchor, trace)
        bins = Bins.over(defs.start, defs.length, int(timeline_bins), defs.nranks) if timeline_bins else None
        kinds = region_kinds(defs)
        ranks = list(stream_ranks(trace, defs, bins, kinds))
    finally:
        trace.close()
    return build(defs, ranks, run_metadata, bins, kinds)



def _anchor(path: Path) -> Path:
    """The anchor file: ``path`` itself, or the one ``*.otf2`` in the folder ``path``."""
    if not path.exists():
        raise FileNotFoundError(path)
    if path.is_dir():
        found = sorted(path.glob("*.otf2"))
        if len(found) != 1:
            raise PerfkitFormatError(path, None, f"the folder holds {len(found)} .otf2 anchor files; expected one")
        path = found[0]
    with open(path, "rb") as fh:
        head = fh.read(64)
    if not sniff(path, head):
        raise PerfkitFormatError(path, None, f"no OTF2 anchor header; expected {EXPECTED}")
    definitions = path.with_suffix(".def")
    if not definitions.is_file():
        raise PerfkitFormatError(path, None, f"the global definitions file {definitions.name} is missing; "
                                 f"expected {EXPECTED}")
    events = path.with_suffix("")
    if not events.is_dir():
        raise PerfkitFormatError(path, None, f"the events folder {events.name}/ is missing; expected {EXPECTED}")
    return path


#: The ``Records`` field of each column of the ranks' tables (``RankEvents``; None: not kept).
_FIELDS = {"inst": ("region", "enter", "leave", "compute"),
           "send": ("peer", "comm", "tag", "bytes", "inst", "nonblocking"),
           "recv": ("peer", "comm", "tag", "bytes", "inst", "post", "seq"),
           "coll": ("comm", "op", "root", None, None, "inst")}


def records(ranks: list[RankEvents]) -> Records:
    """The records of every rank in one column per field, with instance ids made global.

    Each column is allocated once and filled rank by rank; a rank's own tables are emptied as soon
    as they are copied, so the records are never held twice.
    """
    starts = {table: np.concatenate([[0], np.cumsum([getattr(r, table).shape[0] for r in ranks])]).astype(np.int64)
              for table in _FIELDS}
    columns = {f"{table}_{name}": np.empty(int(starts[table][-1]), dtype=np.int64)
               for table, names in _FIELDS.items() for name in (*names, "rank") if name}
    freed = 0  # bytes of the ranks' tables freed since memory was last given back
    for i, r in enumerate(ranks):
        freed += sum(getattr(r, table).nbytes for table in _FIELDS)
        for table, names in _FIELDS.items():
            rows, lo, hi = getattr(r, table), starts[table][i], starts[table][i + 1]
            for j, name in enumerate(names):
                if name:
                    columns[f"{table}_{name}"][lo:hi] = rows[:, j]
            columns[f"{table}_rank"][lo:hi] = r.rank
            if table != "inst":
                columns[f"{table}_inst"][lo:hi] += starts["inst"][i]
            setattr(r, table, np.zeros((0, len(names)), dtype=np.int64))  # the rows live on in the result only
        if freed > TRIM_BYTES:
            give_back()
            freed = 0
    give_back()
    return Records(**columns)


def build(defs: Definitions, ranks: list[RankEvents], run_metadata: dict[str, Any], timeline: Bins | None = None,
          kinds: dict[int, int] | None = None) -> xr.Dataset:
    """The canonical Dataset from the per-rank reductions and records of a trace (and its ``timeline``
    bins, filled while streaming with region ``kinds``)."""
    warnings = list(defs.warnings)
    rec = records(ranks)
    waits = compute_waits(rec, defs.regions, defs.comm_ranks, defs.nranks)
    give_back()  # the matching's temporaries
    computed = np.zeros(defs.nranks, dtype=np.int64)
    computed[[r.rank for r in ranks]] = [r.computed for r in ranks]
    cases = [(scale, None) for scale in TRANSFER_SCALES] + [(1.0, balanced(computed))]
    replayed = replay_runtimes(rec, waits, computed, defs.comm_ranks, cases) / defs.resolution
    give_back()  # the replay's graph
    warnings += waits.warnings
    for r in ranks:
        if r.unbalanced:
            warnings.append(f"rank {r.rank}: {r.unbalanced} Enter/Leave events do not pair up")
        if r.unmapped:
            warnings.append(f"rank {r.rank}: {r.unmapped} messages name a communicator rank the trace does not define")
    rows = _rows(defs, ranks, rec, waits)
    profile = _profile(defs, ranks, rec, waits, rows)
    metrics = METRICS
    if defs.cpu is not None:
        profile = np.concatenate([profile, _cpu_time(defs, ranks, rows, warnings)[..., np.newaxis]], axis=2)
        metrics = (*METRICS, CPU_TIME)
    functions = [f for f, _, _ in rows]
    sizes, bins = _sizes(defs, rec, waits, rows)
    ds = make_run(profile, ranks=range(defs.nranks), functions=functions, calls=[c for _, c, _ in rows],
                  kinds=[k for _, _, k in rows], metrics=metrics, run=_run(defs, ranks, run_metadata),
                  traffic=_traffic(defs, rec, waits), sizes=sizes, size_bins=bins, warnings=warnings, reader=READER)
    give_back()  # the sizes' and traffic's temporaries
    if defs.dropped.any():
        ds["events_dropped"] = (("run", "rank"), defs.dropped[np.newaxis].astype(np.float64),
                                {"description": "events the collector dropped (its trace buffer was full)"})
    seconds = waits.states / defs.resolution
    ds["wait_states"] = (("run", "rank", "state"), seconds[np.newaxis], {"units": "s"})
    ds["replay_elapsed"] = ("run", [replayed[len(TRANSFER_SCALES) - 1]],
                            {"units": "s", "description": "runtime of the trace replayed on an ideal network "
                                                          "(perfkit.io.otf2.replay)"})
    ds["replay_network"] = (("run", "transfer_scale"), replayed[np.newaxis, :len(TRANSFER_SCALES)],
                            {"units": "s", "description": "runtime of the trace replayed with every MPI call's own "
                                                          "time (its duration less its waits) scaled by "
                                                          "transfer_scale: 1 as measured, 1/k on a network k times "
                                                          "faster, 0 the ideal network (perfkit.io.otf2.replay)"})
    ds["replay_balanced"] = ("run", [replayed[-1]],
                             {"units": "s", "description": "runtime of the trace replayed with every rank computing "
                                                           "the mean of the ranks' compute, on the network as "
                                                           "measured (perfkit.io.otf2.replay)"})
    ds = ds.assign_coords(transfer_scale=list(TRANSFER_SCALES))
    ds = ds.assign_coords(state=list(STATES))
    ds.attrs["otf2_timer_resolution"] = defs.resolution
    names = defaultdict(lambda: COMPUTE, {ref: function_of(name) for ref, name in defs.regions.items()})
    labels, values = phase_table(rec, waits, names, defs.nranks, defs.start, defs.resolution)
    if labels:
        ds["phases"] = (("run", "phase", "phase_stat"), values[np.newaxis],
                        {"description": "per phase: start [s], most and mean compute over ranks [s], the rank "
                                        "that computed most, mean wait [s]"})
        ds = ds.assign_coords(phase=labels, phase_stat=list(PHASE_STATS))
    if timeline is not None:
        ds = _with_timeline(ds, defs, timeline, rec, waits, kinds or {})
    return ds


def _with_timeline(ds: xr.Dataset, defs: Definitions, bins: Bins, rec: Records, waits: Waits,
                   kinds: dict[int, int]) -> xr.Dataset:
    """``ds`` with ``timeline`` [s] (run, rank, time_bin, timeline_kind), its waits moved out of their
    calls: each wait is the interval [enter, enter + wait) of its MPI call instance.
    """
    lookup = np.full(max([*kinds, int(rec.inst_region.max(initial=0))]) + 2, NONE, dtype=np.int64)
    lookup[list(kinds)] = list(kinds.values())
    for state, (_, kind) in WAIT_ROWS.items():
        ticks = getattr(waits, state)
        for part in _chunks(ticks.size):
            hit = part.start + np.flatnonzero(ticks[part] > 0)
            own = lookup[rec.inst_region[hit]]  # an event outside any region (-1) reads the last entry, NONE
            mpi = (own >= 0) & (own != KINDS.index("compute"))
            hit, own = hit[mpi], own[mpi]
            enter = rec.inst_enter[hit]
            end = enter + ticks[hit]
            bins.add(rec.inst_rank[hit], enter, end, own, sign=-1)
            bins.add(rec.inst_rank[hit], enter, end, KINDS.index(kind))
    width = bins.width / defs.resolution
    ds["timeline"] = (("run", "rank", "time_bin", "timeline_kind"), bins.ticks[np.newaxis] / defs.resolution,
                      {"units": "s", "description": "seconds of each kind per rank and time bin"})
    index = np.arange(bins.nbins)
    return ds.assign_coords(time_bin=index, timeline_kind=list(KINDS),
                            time=(("run", "time_bin"), ((index + 0.5) * width)[np.newaxis],
                                  {"units": "s", "description": "bin centre from the run's start"}),
                            time_bin_width=("run", [width], {"units": "s"}))


def _rows(defs: Definitions, ranks: list[RankEvents], rec: Records, waits: Waits) -> list[tuple[str, str, str]]:
    """(function, call, kind) of every row: Compute, each MPI call seen, and the wait rows of calls
    that can have them (receives, blocking sends, collectives), whether or not they waited.
    """
    seen: set[str] = set()
    for r in ranks:
        seen.update(function_of(defs.regions.get(ref, "")) for ref in r.region_ticks)
        seen.update(function_of(defs.regions.get(ref, "")) for ref in r.region_visits)
    calls = sorted(seen - {COMPUTE})
    rows = [(COMPUTE, COMPUTE, "compute")] + [(c, c, default_kind(c)) for c in calls]
    can_wait = {
        "late_sender": _region_calls(defs, rec.inst_region[rec.recv_inst]),
        "late_receiver": _region_calls(defs, rec.inst_region[rec.send_inst]) & BLOCKING_SENDS,
        "collective": _region_calls(defs, rec.inst_region[rec.coll_inst]),
    }
    for state, (prefix, kind) in WAIT_ROWS.items():
        rows += [(prefix + c, c, kind) for c in sorted(can_wait[state]) if c in calls]
    return rows


def _region_calls(defs: Definitions, regions: np.ndarray) -> set[str]:
    names = {function_of(defs.regions.get(int(ref), "")) for ref in np.unique(regions)}
    return names - {COMPUTE}


def _profile(defs: Definitions, ranks: list[RankEvents], rec: Records, waits: Waits,
             rows: list[tuple[str, str, str]]) -> np.ndarray:
    """(rank, function, metric) values: time [s], calls, bytes and messages sent and received."""
    index = {f: i for i, (f, _, _) in enumerate(rows)}
    out = np.zeros((defs.nranks, len(rows), len(METRICS)))
    col = {m: j for j, m in enumerate(METRICS)}
    sums = (("time", "region_ticks"), ("calls", "region_visits"), ("bytes_sent", "region_bytes_sent"),
            ("calls_sent", "region_msgs_sent"), ("bytes_recv", "region_bytes_recv"),
            ("calls_recv", "region_msgs_recv"))
    for r in ranks:
        for metric, attr in sums:
            for ref, value in getattr(r, attr).items():
                out[r.rank, index[function_of(defs.regions.get(ref, ""))], col[metric]] += value
    out[:, index[COMPUTE], col["calls"]] = np.nan
    for state, (prefix, _) in WAIT_ROWS.items():
        ticks = getattr(waits, state)
        hit = np.flatnonzero(ticks > 0)
        inst_fn = _row_of_region(defs, index, rec.inst_region[hit])
        wait_fn = np.array([index.get(prefix + rows[f][1], -1) for f in range(len(rows))])[inst_fn]
        keep = wait_fn >= 0
        hit, inst_fn, wait_fn = hit[keep], inst_fn[keep], wait_fn[keep]
        rank, ticks = rec.inst_rank[hit], ticks[hit]
        np.add.at(out[..., col["time"]], (rank, wait_fn), ticks)
        np.add.at(out[..., col["time"]], (rank, inst_fn), -ticks)
        np.add.at(out[..., col["calls"]], (rank, wait_fn), 1)
        waiting_rows = [index[f] for f, _, _ in rows if f.startswith(prefix)]
        out[:, waiting_rows, col["bytes_sent"]:] = np.nan
    out[..., col["time"]] /= defs.resolution
    return out


def _cpu_time(defs: Definitions, ranks: list[RankEvents], rows: list[tuple[str, str, str]],
              warnings: list[str]) -> np.ndarray:
    """(rank, function) CPU time [s]: each call's on its own row (NaN on wait rows), the rest on ``Compute``; NaN
    for a rank whose metric could not be read (named in ``warnings``)."""
    index = {f: i for i, (f, _, _) in enumerate(rows)}
    out = np.zeros((defs.nranks, len(rows)))
    location = {rank: ref for ref, rank in defs.world.items()}
    for r in ranks:
        if r.cpu_problem:
            out[r.rank] = np.nan
            member = defs.path.parent / events_member(defs.path, location[r.rank])
            warnings.append(f"{member} (rank {r.rank}): {r.cpu_problem}; the rank's cpu_time is NaN")
            continue
        for ref, seconds in r.region_cpu.items():
            out[r.rank, index[function_of(defs.regions.get(ref, ""))]] += seconds
    out[:, [i for i, (f, c, _) in enumerate(rows) if f != c]] = np.nan  # waits: their CPU is their call's
    return out


def _row_of_region(defs: Definitions, index: dict[str, int], regions: np.ndarray) -> np.ndarray:
    """The profile row of each region reference in ``regions`` (Compute for non-MPI and unknown regions)."""
    size = max([*defs.regions, int(regions.max(initial=0))]) + 2
    lookup = np.full(size, index[COMPUTE], dtype=np.int64)
    for ref, name in defs.regions.items():
        lookup[ref] = index.get(function_of(name), index[COMPUTE])
    return lookup[regions]  # an event outside any region (-1) reads the last entry, Compute


def _chunks(n: int) -> Iterator[slice]:
    """Slices of ``CHUNK`` rows covering ``n`` rows: the per-message passes hold one chunk's temporaries."""
    return (slice(lo, min(lo + CHUNK, n)) for lo in range(0, n, CHUNK))


def _recv_shares(rec: Records, waits: Waits) -> np.ndarray:
    """Per instance: how many matched messages it completed."""
    shares = np.zeros(rec.inst_rank.size, dtype=np.int64)
    for part in _chunks(waits.recv_index.size):
        shares += np.bincount(rec.recv_inst[waits.recv_index[part]], minlength=shares.size)
    return shares


def _message_time(rec: Records, recv: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Per matched receive record ``recv``: its share [ticks] of the receive instance that completed it."""
    r_inst = rec.recv_inst[recv]
    return (rec.inst_leave[r_inst] - rec.inst_enter[r_inst]) / shares[r_inst]


def _pair_totals(parts: Iterator[tuple[np.ndarray, list[np.ndarray]]],
                 quantities: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The distinct codes of ``parts`` (code, weights per quantity) and each quantity's total per code."""
    codes: list[np.ndarray] = []
    sums: list[list[np.ndarray]] = []
    for code, weights in parts:
        distinct, where = np.unique(code, return_inverse=True)
        codes.append(distinct)
        sums.append([np.bincount(where.ravel(), weights=w, minlength=distinct.size) for w in weights])
    if not codes:
        return np.zeros(0, dtype=np.int64), [np.zeros(0) for _ in range(quantities)]
    distinct, where = np.unique(np.concatenate(codes), return_inverse=True)
    totals = [np.bincount(where.ravel(), weights=np.concatenate(q), minlength=distinct.size) for q in zip(*sums)]
    return distinct, totals


def _traffic(defs: Definitions, rec: Records, waits: Waits) -> Any:
    """(sender, receiver, quantity) bytes and messages of every send, time [s] of every matched receive."""
    n = defs.nranks

    def sent() -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
        for part in _chunks(rec.send_rank.size):
            peer = rec.send_peer[part]
            ok = (peer >= 0) & (peer < n)
            yield rec.send_rank[part][ok] * n + peer[ok], [rec.send_bytes[part][ok].astype(np.float64),
                                                           np.ones(int(ok.sum()))]

    def timed() -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
        for part in _chunks(waits.send_index.size):
            recv = waits.recv_index[part]
            yield (rec.send_rank[waits.send_index[part]] * n + rec.recv_rank[recv],
                   [_message_time(rec, recv, shares) / defs.resolution])

    shares = _recv_shares(rec, waits)
    pairs, (nbytes, count) = _pair_totals(sent(), 2)
    timed_pairs, (times,) = _pair_totals(timed(), 1)
    quantities = {"bytes": (pairs, nbytes), "count": (pairs, count), "time": (timed_pairs, times)}
    if dense_traffic(n, pairs.size * len(TRAFFIC_QUANTITIES)):
        out = np.zeros((n * n, len(TRAFFIC_QUANTITIES)))
        for q, name in enumerate(TRAFFIC_QUANTITIES):
            code, values = quantities[name]
            out[code, q] = values
        return out.reshape(n, n, len(TRAFFIC_QUANTITIES))
    coords = np.hstack([np.vstack([code // n, code % n, np.full(code.size, q)])
                        for q, (code, _) in enumerate(quantities[name] for name in TRAFFIC_QUANTITIES)])
    data = np.concatenate([quantities[name][1] for name in TRAFFIC_QUANTITIES])
    return sorted_coo(coords, data, (n, n, len(TRAFFIC_QUANTITIES)))


def _size_code(nbytes: np.ndarray) -> np.ndarray:
    """The power-of-two bin of each message size: 0 for empty messages, else 1 + the exponent of
    its upper edge."""
    sizes = np.asarray(nbytes, dtype=np.float64)
    return np.where(sizes > 0, np.ceil(np.log2(np.maximum(sizes, 1))) + 1, 0).astype(np.int64)


def _sizes(defs: Definitions, rec: Records, waits: Waits,
           rows: list[tuple[str, str, str]]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(rank, function, size_bin, stat) message counts and time [s], sends and receives by the call they were in."""
    if not rec.send_rank.size and not rec.recv_rank.size:
        return None, None
    index = {f: i for i, (f, _, _) in enumerate(rows)}
    present = np.zeros(66, dtype=np.int64)
    for column in (rec.send_bytes, rec.recv_bytes):
        for part in _chunks(column.size):
            present += np.bincount(_size_code(column[part]), minlength=present.size)
    codes = np.flatnonzero(present)
    bins = np.where(codes > 0, 2.0 ** (codes - 1), 0.0)  # upper edge [B]
    bin_of = np.zeros(present.size, dtype=np.int64)
    bin_of[codes] = np.arange(codes.size)
    out = np.zeros((defs.nranks * len(rows) * bins.size, 2))

    def add(rank: np.ndarray, inst: np.ndarray, nbytes: np.ndarray, ticks: np.ndarray | None,
            count: bool = True) -> None:
        cell = (rank * len(rows) + _row_of_region(defs, index, rec.inst_region[inst])) * bins.size
        cell += bin_of[_size_code(nbytes)]
        if count:
            out[:, 0] += np.bincount(cell, minlength=out.shape[0])
        if ticks is not None:
            out[:, 1] += np.bincount(cell, weights=ticks / defs.resolution, minlength=out.shape[0])

    per_send = np.bincount(rec.send_inst, minlength=rec.inst_rank.size)
    for part in _chunks(rec.send_rank.size):
        inst = rec.send_inst[part]
        add(rec.send_rank[part], inst, rec.send_bytes[part],
            (rec.inst_leave[inst] - rec.inst_enter[inst]) / per_send[inst])
    del per_send
    for part in _chunks(rec.recv_rank.size):
        add(rec.recv_rank[part], rec.recv_inst[part], rec.recv_bytes[part], None)
    shares = _recv_shares(rec, waits)
    for part in _chunks(waits.recv_index.size):  # the time of the matched receives
        recv = waits.recv_index[part]
        add(rec.recv_rank[recv], rec.recv_inst[recv], rec.recv_bytes[recv], _message_time(rec, recv, shares),
            count=False)
    return out.reshape(defs.nranks, len(rows), bins.size, 2), bins


def _run(defs: Definitions, ranks: list[RankEvents], meta: dict[str, Any]) -> dict[str, Any]:
    """Run coordinates: what the trace states (ranks, nodes, elapsed), then ``meta``."""
    hosts = {h for h in defs.hosts.values() if h}
    firsts = [r.first for r in ranks if r.first >= 0]
    elapsed = (max(r.last for r in ranks) - min(firsts)) / defs.resolution if firsts else None
    nodes = len(hosts) or None
    ppn = defs.nranks / nodes if nodes and defs.nranks % nodes == 0 else None
    stated = {"nprocs": defs.nranks, "nodes": nodes, "ppn": ppn, "elapsed": elapsed, "format": "otf2"}
    return {**{k: v for k, v in stated.items() if v is not None}, **meta}
