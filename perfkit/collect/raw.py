"""Read what the collector library writes at ``MPI_Finalize`` into a one-run canonical Dataset.

Every rank writes its own part of one file at its own offset (nothing is gathered): rank 0's text header
(function table, options, clocks, ``rows``, ``host_width``, ending with the line ``data``), then
``rows`` records of 11 float64 each in rank order,
``(0, rank, fid, part, time, calls, bytes_sent, calls_sent, bytes_recv, calls_recv, cpu_time)`` per function
(``fid`` -1 is Compute; ``part`` 0 the call, 1 its send-late time ``w_``, 2 its collective wait
``b_``; ``cpu_time`` NaN but on part 0 with CPU measurement), ``(1, rank, fid, bin, messages)`` per
message-size bin, ``(2, rank, source, 0, bytes, count, time, collective_bytes)`` per sender of what this
rank received and, with CPU measurement (option ``cpu``), ``(3, rank, *CPU_STATS)`` once per rank,
then each rank's host name in ``host_width`` NUL-padded bytes, then rank 0's trailer (``key value``
lines: its time in the collector's ``MPI_Finalize`` [s] and its peak memory before and after [KiB]).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import sparse
import xarray as xr

from perfkit.model import (
    COLLECTIVE_BYTES,
    CPU_STATS,
    CPU_TIME,
    METRICS,
    SIZE_STATS,
    TRAFFIC_QUANTITIES,
    default_kind,
    dense_traffic,
    make_run,
)

ROW = 11
VERSION = "3"
PARTS = (("", None), ("w_", "wait_late_sender"), ("b_", "wait_collective"))
NBIN = 66
#: Trailer fields: rank 0's time in the collector's MPI_Finalize [s], its peak resident memory (VmHWM) when it
#: entered it and when it had written its part [KiB]; the Dataset attribute each becomes.
FINALIZE_FIELDS = {"finalize_seconds": "collect_finalize_s",
                   "finalize_peak_before_kib": "collect_rank0_peak_before_kib",
                   "finalize_peak_kib": "collect_rank0_peak_kib"}


class RawCollectorError(ValueError):
    """The collector's output is damaged (a rank died while it was written, or a version mismatch)."""


def _header(data: bytes, path: Path) -> tuple[dict[str, Any], int]:
    """The header's fields and where the records begin [B]."""
    pos, line, info = 0, 0, {"functions": [], "fields": {}}
    while True:
        end = data.find(b"\n", pos)
        line += 1
        if end < 0:
            raise RawCollectorError(f"{path}: collector output ends inside its header (line {line})")
        words = data[pos:end].decode("utf-8", "replace").split()
        pos = end + 1
        if not words:
            continue
        key = words[0]
        if line == 1 and (key != "perfkit-collect" or words[1:] != [VERSION]):
            raise RawCollectorError(f"{path}, line 1: collector output version {words[1:]}, expected {VERSION}")
        if key == "data":
            missing = [k for k in ("ranks", "rows", "host_width") if k not in info["fields"]]
            if missing:
                raise RawCollectorError(f"{path}, line {line}: header ends without {', '.join(missing)}")
            return info, pos
        if key.startswith("MPI_"):
            info["functions"].append((key, int(words[1])))
        elif key == "options":
            info["options"] = {k: v == "1" for k, v in (w.split("=") for w in words[1:])}
        elif len(words) > 1:
            info["fields"][key] = words[1]


def _trailer(text: bytes, path: Path) -> dict[str, float]:
    """Rank 0's ``key value`` lines after the hosts, up to ``end``."""
    fields = dict(line.split()[:2] for line in text.decode("utf-8", "replace").splitlines() if len(line.split()) >= 2)
    if not text.endswith(b"end\n"):
        raise RawCollectorError(f"{path}: collector output ends before its trailer's 'end' line")
    return {k: float(v) for k, v in fields.items()}


def read_raw(path: str | Path, **run_metadata: Any) -> xr.Dataset:
    """The run the collector wrote to ``path`` as a canonical Dataset (format ``mpinside``)."""
    path = Path(path)
    data = path.read_bytes()
    info, start = _header(data, path)
    fields = info["fields"]
    nranks, names = int(fields["ranks"]), [n for n, _ in info["functions"]]
    nrows, width = int(fields["rows"]), int(fields["host_width"])
    hosts_at = start + nrows * ROW * 8
    end = hosts_at + nranks * width
    if len(data) < end:
        raise RawCollectorError(f"{path}: {max(len(data) - start, 0) // (ROW * 8)} records where the header "
                                f"announces {nrows}, then {nranks} host names of {width} B")
    rows = np.frombuffer(data, dtype=np.float64, count=nrows * ROW, offset=start).reshape(-1, ROW)
    host_names = np.frombuffer(data, dtype=f"S{width}", count=nranks, offset=hosts_at)
    trailer = _trailer(data[end:], path)
    kind_of_row = rows[:, 0].astype(np.int64)
    stats, hist, mat = rows[kind_of_row == 0], rows[kind_of_row == 1], rows[kind_of_row == 2]
    options = info.get("options", {})
    with_cpu = bool(options.get("cpu"))
    metrics = (*METRICS, CPU_TIME) if with_cpu else METRICS

    compute = stats[stats[:, 2] < 0]
    calls_ = stats[stats[:, 2] >= 0]
    slots = calls_[:, 2].astype(np.int64) * 3 + calls_[:, 3].astype(np.int64)
    used = np.unique(slots)
    labels = ["Compute"] + [PARTS[s % 3][0] + names[s // 3] for s in used]
    call_of = ["Compute"] + [names[s // 3] for s in used]
    kinds = ["compute"] + [PARTS[s % 3][1] or default_kind(names[s // 3]) for s in used]
    column = np.searchsorted(used, slots) + 1
    rank = calls_[:, 1].astype(np.int64)

    profile = np.zeros((nranks, len(labels), len(metrics)))
    columns = ("time", "calls", "bytes_sent", "calls_sent", "bytes_recv", "calls_recv", CPU_TIME)[:len(metrics)]
    order = [metrics.index(m) for m in columns]
    profile[rank[:, None], column[:, None], np.array(order)[None, :]] = calls_[:, 4:4 + len(columns)]
    profile[:, 0, :] = np.nan  # Compute: only time (and CPU time) apply
    profile[compute[:, 1].astype(np.int64), 0, METRICS.index("time")] = compute[:, 4]
    if with_cpu:
        profile[compute[:, 1].astype(np.int64), 0, metrics.index(CPU_TIME)] = compute[:, 10]
    waits = np.array([k in ("wait_late_sender", "wait_collective") for k in kinds])
    if with_cpu:
        profile[:, waits, metrics.index(CPU_TIME)] = np.nan  # a call's CPU time is on its main part
    for m in ("bytes_sent", "calls_sent", "bytes_recv", "calls_recv"):
        profile[:, waits, METRICS.index(m)] = np.nan  # inserted waits move no data

    traffic = sizes = bins = None
    if options.get("matrices"):
        traffic = _traffic(mat, nranks)
        sizes, bins = _sizes(hist, used, nranks, len(labels))
    hosts = np.char.decode(host_names, "utf-8", "replace").tolist()
    per_host = np.unique(hosts, return_counts=True)[1]
    mode = "+".join(m for m, on in (("slt", options.get("slt")), ("collective_wait", options.get("collective_wait")))
                    if on) or "basic"
    run = {"format": "mpinside", "mode": mode, "nprocs": nranks, "nodes": per_host.size,
           "ppn": int(per_host[0]) if np.all(per_host == per_host[0]) else np.nan,
           "elapsed": float(np.nanmax(np.nansum(profile[:, :, METRICS.index("time")], axis=1))),
           "system": hosts[0] if per_host.size == 1 else "", **run_metadata}
    warnings = []
    if int(fields.get("unmatched_piggybacks", 0)):
        warnings.append(f"{fields['unmatched_piggybacks']} send timestamps were never received: receives the "
                        "collector does not see (e.g. MPI_Mrecv) or cancelled sends; send-late time near them "
                        "may be wrong")
    if int(fields.get("other_thread_calls", 0)):
        warnings.append(f"{fields['other_thread_calls']} MPI calls from threads other than the one that called "
                        "MPI_Init were not profiled (their time is in Compute)")
    rank_cpu = _rank_cpu(rows[kind_of_row == 3], nranks) if with_cpu else None
    ds = make_run(profile, ranks=np.arange(nranks), functions=labels, calls=call_of, kinds=kinds,
                  metrics=metrics, run=run, rank_cpu=rank_cpu, traffic=traffic, sizes=sizes, size_bins=bins,
                  warnings=warnings, reader="perfkit.collect", hosts=hosts)
    # clocks, with --slt or --collective-wait on several nodes [s]: the largest change of a node's offset over
    # the run, the largest offset measured, and the largest bound of an offset's error (half a round trip)
    for attr, field in (("drift", "clock_drift"), ("offset", "clock_offset"), ("offset_bound", "clock_bound")):
        ds.attrs[f"collect_clock_{attr}_s"] = float(fields.get(field, "nan"))
    for field, attr in FINALIZE_FIELDS.items():
        ds.attrs[attr] = trailer.get(field, float("nan"))
    return ds


def _rank_cpu(records: np.ndarray, nranks: int) -> np.ndarray:
    """(rank, cpu_stat) from the ranks' CPU records; NaN for a rank without one."""
    out = np.full((nranks, len(CPU_STATS)), np.nan)
    out[records[:, 1].astype(np.int64)] = records[:, 2:2 + len(CPU_STATS)]
    return out


def _traffic(mat: np.ndarray, nranks: int) -> Any:
    """(sender, receiver, quantity) from the receivers' records: ``TRAFFIC_QUANTITIES`` then ``collective_bytes``,
    a ``sparse.COO`` unless dense is smaller (``perfkit.model.dense_traffic``); never an N x N array otherwise."""
    quantities = (*TRAFFIC_QUANTITIES, COLLECTIVE_BYTES)
    assert quantities == ("bytes", "count", "time", "collective_bytes")  # the record's columns 4-7
    receiver, sender = mat[:, 1].astype(np.int64), mat[:, 2].astype(np.int64)
    values = mat[:, 4:8]
    nq = len(quantities)
    coords = np.stack([np.repeat(sender, nq), np.repeat(receiver, nq), np.tile(np.arange(nq), len(mat))])
    keep = values.ravel() != 0  # one record per (receiver, sender): no duplicates to sum
    out = sparse.COO(coords[:, keep], values.ravel()[keep], shape=(nranks, nranks, nq), fill_value=0.0,
                     has_duplicates=False)
    return out.todense() if dense_traffic(nranks, out.nnz) else out


def _sizes(hist: np.ndarray, used: np.ndarray, nranks: int, nlabels: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank, function, size_bin, stat) over the bins that occur; bin label 0 or 2**(b-1) bytes."""
    bins_present = np.unique(hist[:, 3].astype(np.int64)) if len(hist) else np.array([0])
    labels = np.where(bins_present == 0, 0.0, 2.0 ** (bins_present - 1))
    out = np.full((nranks, nlabels, bins_present.size, len(SIZE_STATS)), np.nan)
    main_cols = np.searchsorted(used, hist[:, 2].astype(np.int64) * 3) + 1
    out[:, 1:, :, :] = 0.0
    r, b = hist[:, 1].astype(np.int64), np.searchsorted(bins_present, hist[:, 3].astype(np.int64))
    out[r, main_cols, b, SIZE_STATS.index("count")] = hist[:, 4]
    out[:, :, :, SIZE_STATS.index("time")] = np.nan  # a message's time is not separable from its call's
    return out, labels
