"""Read what the collector library writes at ``MPI_Finalize`` into a one-run canonical Dataset.

The file is a short text header (function table, options, hosts) followed by ``rows`` records of
10 float64 each, gathered on rank 0:
``(0, rank, fid, part, time, calls, bytes_sent, calls_sent, bytes_recv, calls_recv)`` per function
(``fid`` -1 is Compute; ``part`` 0 the call, 1 its send-late time ``w_``, 2 its collective wait
``b_``), ``(1, rank, fid, bin, messages)`` per message-size bin and
``(2, rank, source, 0, bytes, count, time)`` per sender of messages this rank received.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import sparse
import xarray as xr

from perfkit.model import METRICS, SIZE_STATS, TRAFFIC_QUANTITIES, default_kind, make_run

ROW = 10
PARTS = (("", None), ("w_", "wait_late_sender"), ("b_", "wait_collective"))
NBIN = 66
SPARSE_ABOVE = 4096  # ranks: traffic is kept as sparse.COO above this


class RawCollectorError(ValueError):
    """The collector's output is damaged (a rank died while it was written, or a version mismatch)."""


def _header(data: bytes, path: Path) -> tuple[dict[str, Any], int]:
    pos, info = 0, {"functions": [], "hosts": {}, "fields": {}}
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            raise RawCollectorError(f"{path}: collector output ends inside its header")
        words = data[pos:end].decode("utf-8", "replace").split()
        pos = end + 1
        if not words:
            continue
        key = words[0]
        if key == "perfkit-collect" and words[1:] != ["1"]:
            raise RawCollectorError(f"{path}: collector output version {words[1:]} is not 1")
        elif key.startswith("MPI_"):
            info["functions"].append((key, int(words[1])))
        elif key == "host":
            info["hosts"][int(words[1])] = " ".join(words[2:])
        elif key == "options":
            info["options"] = {k: v == "1" for k, v in (w.split("=") for w in words[1:])}
        elif key == "rows":
            return {**info, "rows": int(words[1])}, pos
        else:
            info["fields"][key] = words[1]


def read_raw(path: str | Path, **run_metadata: Any) -> xr.Dataset:
    """The run the collector wrote to ``path`` as a canonical Dataset (format ``mpinside``)."""
    path = Path(path)
    data = path.read_bytes()
    info, start = _header(data, path)
    fields = info["fields"]
    nranks, names = int(fields["ranks"]), [n for n, _ in info["functions"]]
    body = np.frombuffer(data, dtype=np.float64, offset=start)
    if body.size != info["rows"] * ROW:
        raise RawCollectorError(f"{path}: {body.size // ROW} records where the header announces {info['rows']}")
    rows = body.reshape(-1, ROW)
    kind_of_row = rows[:, 0].astype(np.int64)
    stats, hist, mat = rows[kind_of_row == 0], rows[kind_of_row == 1], rows[kind_of_row == 2]

    compute = stats[stats[:, 2] < 0]
    calls_ = stats[stats[:, 2] >= 0]
    slots = calls_[:, 2].astype(np.int64) * 3 + calls_[:, 3].astype(np.int64)
    used = np.unique(slots)
    labels = ["Compute"] + [PARTS[s % 3][0] + names[s // 3] for s in used]
    call_of = ["Compute"] + [names[s // 3] for s in used]
    kinds = ["compute"] + [PARTS[s % 3][1] or default_kind(names[s // 3]) for s in used]
    column = np.searchsorted(used, slots) + 1
    rank = calls_[:, 1].astype(np.int64)

    profile = np.zeros((nranks, len(labels), len(METRICS)))
    order = [METRICS.index(m) for m in ("time", "calls", "bytes_sent", "calls_sent", "bytes_recv", "calls_recv")]
    profile[rank[:, None], column[:, None], np.array(order)[None, :]] = calls_[:, 4:10]
    profile[:, 0, :] = np.nan  # Compute: only time applies
    profile[compute[:, 1].astype(np.int64), 0, METRICS.index("time")] = compute[:, 4]
    waits = np.array([k in ("wait_late_sender", "wait_collective") for k in kinds])
    for m in ("bytes_sent", "calls_sent", "bytes_recv", "calls_recv"):
        profile[:, waits, METRICS.index(m)] = np.nan  # inserted waits move no data

    options = info.get("options", {})
    traffic = sizes = bins = None
    if options.get("matrices"):
        traffic = _traffic(mat, nranks)
        sizes, bins = _sizes(hist, used, nranks, len(labels))
    hosts = [info["hosts"].get(r, "") for r in range(nranks)]
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
    ds = make_run(profile, ranks=np.arange(nranks), functions=labels, calls=call_of, kinds=kinds,
                  metrics=METRICS, run=run, traffic=traffic, sizes=sizes, size_bins=bins, warnings=warnings,
                  reader="perfkit.collect", hosts=hosts)
    # clocks, with --slt or --collective-wait on several nodes [s]: the largest change of a node's offset over
    # the run, the largest offset measured, and the largest bound of an offset's error (half a round trip)
    for attr, field in (("drift", "clock_drift"), ("offset", "clock_offset"), ("offset_bound", "clock_bound")):
        ds.attrs[f"collect_clock_{attr}_s"] = float(fields.get(field, "nan"))
    return ds


def _traffic(mat: np.ndarray, nranks: int) -> Any:
    """(sender, receiver, quantity) from the receivers' records."""
    receiver, sender = mat[:, 1].astype(np.int64), mat[:, 2].astype(np.int64)
    values = mat[:, 4:7]  # bytes, count, time in TRAFFIC_QUANTITIES order
    assert tuple(TRAFFIC_QUANTITIES) == ("bytes", "count", "time")
    if nranks > SPARSE_ABOVE:
        q = np.repeat(np.arange(3)[None, :], len(mat), axis=0).ravel()
        coords = np.stack([np.repeat(sender, 3), np.repeat(receiver, 3), q])
        return sparse.COO(coords, values.ravel(), shape=(nranks, nranks, 3))
    out = np.zeros((nranks, nranks, 3))
    out[sender, receiver, :] = values
    return out


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
