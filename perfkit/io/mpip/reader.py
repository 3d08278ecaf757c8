"""mpiP text reports (versions 2.x-3.5, verbose and concise ``-c``) -> the canonical Dataset.

Verbose reports give per-rank values. For each rank and MPI function (mpiP's ``Allreduce`` is
labelled ``MPI_Allreduce``), summed over the function's call sites (keyed by call-site ID):

* ``time`` [s]: Count x Mean of "Callsite Time statistics" (mpiP prints milliseconds);
* ``calls``: Count of the same rows; ``time_max`` / ``time_min`` [s]: longest / shortest call;
* ``bytes_sent`` [B] and ``calls_sent``: Sum and Count of "Callsite Message Sent statistics";
  ``bytes_io`` / ``bytes_rma`` [B] likewise from the I/O and RMA sections when present;
* ``Compute`` time = AppTime - MPITime of the rank ("MPI Time" section).

Rows hidden by a print threshold (``-t``) are detected (a site's ``*`` row counts more calls than
its rank rows): the affected (rank, function) cells are NaN and a warning says so.

Concise reports carry no per-rank rows, so ``profile`` stays NaN for every function and rank.
What they do state is kept in extra variables:

* ``summary`` (run, function, metric, stat) with stat ``total``, ``mean``, ``max``, ``min``: the
  distribution over ranks of each function's per-rank total (``max``/``min`` only when the
  function has a single call site: maxima of different sites need not fall on the same rank);
* ``rank_of_max`` / ``rank_of_min`` (run, function, metric): the rank mpiP names for those;
* ``task_time`` (run, task_metric, task_stat) with task_metric ``app``/``mpi`` and task_stat ``total``,
  ``mean``, ``max``, ``min``, ``stddev`` [s], and ``task_rank_of_max`` / ``task_rank_of_min``.

``nprocs`` of a concise report is Aggregate AppTime / Mean AppTime (both printed to 1 us).

Both styles: ``-y``/``-p`` histograms become ``coll_time_share`` / ``p2p_sent_share``
(run, function, comm_bin, size_bin) in percent, NaN for bins outside mpiP's top twenty; run
``elapsed`` is the largest AppTime (MPI_Init to MPI_Finalize of the slowest rank). Header facts
(command, version, start/stop, hosts...) go to ``attrs`` as ``mpip_*``. See docs/formats/mpip.md.

Reading: the report is mapped, its sections found as byte ranges (``perfkit.io.mpip.scan``) and
the per-rank tables parsed by pandas' C parser (``perfkit.io.mpip.tables``); a table with a row
that does not fit is read line by line instead, which names the bad line. Peak memory stays
under 3x the file size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.io.mpip.scan import Report, Section, fail, scan
from perfkit.io.mpip.tables import TOO_LARGE, parse
from perfkit.model import COMPUTE, METRICS, make_run

READER = "perfkit.io.mpip"
STATS = ("total", "mean", "max", "min")
TASK_STATS = (*STATS, "stddev")

_CALLSITE_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(?:(\d+)\s+)?(\S.*?)\s*$")
_QUIET_LINES = ("No collective operations to report", "No point to point operations to report")
_THRESHOLD_NOTE = "Total send/collective operation calls"
_BYTES_KINDS = ("sent", "io", "rma")
_TIME_COLUMNS = ("Name", "Site", "Rank", "Count", "Max", "Mean", "Min", "App%", "MPI%")
_BYTES_COLUMNS = ("Name", "Site", "Rank", "Count", "Max", "Mean", "Min", "Sum")
_CONCISE_COLUMNS = ("Name", "Site", "Tasks", "Max", "Mean", "Min", "MaxRnk", "MinRnk")
#: mpiP's report name: ``<program>.<ranks>.<process id>.<index>.mpiP``.
_REPORT_NAME = re.compile(r"^(?P<run>.+\.\d+)\.\d+\.\d+$")
_HIST_COLUMNS = {
    "hist_coll": ("Call", "MPI", "Time", "%", "Comm", "Size", "Data", "Size"),
    "hist_p2p": ("Call", "MPI", "Sent", "%", "Comm", "Size", "Data", "Size"),
}


def sniff(path: Path, head: bytes) -> bool:
    """True if ``head`` (the first bytes of ``path``) starts like an mpiP report."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return text.startswith(b"@ mpiP") and b"@ Version" in head[:4096]


def run_stem(path: Path) -> str:
    """``path``'s stem without mpiP's process id and report index (``HPCCG.4.27750.1.mpiP`` -> ``HPCCG.4``);
    any other file's stem as it is."""
    match = _REPORT_NAME.match(path.stem) if path.suffix == ".mpiP" else None
    return match["run"] if match else path.stem


def read(path: str | PathLike, **run_metadata: Any) -> xr.Dataset:
    """Read one mpiP report into the canonical Dataset (times in s, bytes in B).

    File facts (nprocs, nodes, ppn, elapsed, format) take precedence over ``run_metadata``,
    which fills the rest (label, source, system...).
    """
    report = scan(Path(path))
    if "cs_time_concise" in report.sections or "task_concise" in report.sections:
        return _concise_dataset(report, run_metadata)
    return _verbose_dataset(report, run_metadata)


def callsites(path: str | PathLike) -> pd.DataFrame:
    """Tidy call-site table of one mpiP report, one row per (site, rank), times in s.

    Verbose reports: ``rank`` is <NA> on the ``*`` aggregate rows (``aggregate`` True); columns
    ``count``, ``time`` (= count x mean), ``time_max``/``time_mean``/``time_min`` per call,
    ``app_pct``, ``mpi_pct``, and per bytes section (sent, io, rma) ``<kind>_count``,
    ``bytes_<kind>``, ``<kind>_max``/``<kind>_mean``/``<kind>_min`` per call [B].
    Concise reports: one row per site, rank <NA>, ``tasks`` and per-task totals
    ``time_task_max``/``_mean``/``_min``, ``time_rank_of_max``/``_min`` (and the same for bytes).
    Both carry ``site``, ``function`` (``MPI_Xxx``), ``file``, ``line``, ``parent`` (level 0 of
    the stack) and ``stack`` (all levels, ``func (file:line)`` joined by `` < ``).
    """
    report = scan(Path(path))
    if "cs_time_concise" in report.sections:
        table = _concise_site_table(report)
    else:
        table = _verbose_site_table(report)
    return _with_locations(report, table)


# ---------------------------------------------------------------- tables


def _tokens(report: Report, section: Section, ncols: int) -> tuple[list[int], list[list[str]]]:
    """Rows of ``section`` split on whitespace; each must have ``ncols`` fields."""
    linenos, rows = [], []
    for lineno, text in section.rows:
        fields = text.split()
        if len(fields) != ncols:
            note = text.strip()
            if note.startswith(_QUIET_LINES):
                continue
            if note.startswith(_THRESHOLD_NOTE):
                report.warnings.append(f"line {lineno}: {note!r} not read")
                continue
            raise fail(report, lineno, f"expected {ncols} columns in section {section.title!r}, found {len(fields)}")
        linenos.append(lineno)
        rows.append(fields)
    return linenos, rows


def _check_header(report: Report, section: Section, expected: Sequence[str]) -> None:
    text = section.header_text
    if text is None:
        if section.rows:
            raise fail(report, section.rows[0][0], f"section {section.title!r} lacks its column header")
        return
    if text.strip().startswith(_QUIET_LINES):
        section.header_text = None
        return
    if tuple(text.split()) != tuple(expected):
        found, lineno = text.strip(), section.header_line
        raise fail(report, lineno, f"expected columns {' '.join(expected)} in {section.title!r}, found {found!r}")


def _numbers(report: Report, linenos: list[int], values: Sequence[str], column: str) -> np.ndarray:
    """Column of numeric text -> float64 (PerfkitFormatError naming the first bad line). mpiP prints no
    negative number (times, bytes, counts, percentages, ranks, sizes): NaN, negative, infinite and
    too large values are refused, quoting the token read."""
    try:
        numbers = np.asarray(values, dtype=np.float64)
    except ValueError:
        for lineno, value in zip(linenos, values, strict=True):
            try:
                float(value)
            except ValueError:
                raise fail(report, lineno, f"expected a number in column {column!r}, found {value!r}") from None
        raise
    bad = np.flatnonzero(~((numbers >= 0) & (numbers < TOO_LARGE)))
    if bad.size:
        k = int(bad[0])
        raise fail(report, linenos[k], f"column {column!r}: expected a non-negative {_kind(column)}, "
                                       f"found {values[k]!r}")
    return numbers


def _kind(column: str) -> str:
    """What ``column`` holds, in words: time (AppTime, MPITime, the call-time statistics) or number."""
    return "time" if column in ("AppTime", "MPITime", "AppTime/MPITime", "Time") else "number"


def _integers(report: Report, linenos: list[int], values: Sequence[str], column: str) -> np.ndarray:
    numbers = _numbers(report, linenos, values, column)
    bad = np.flatnonzero(numbers != np.round(numbers))
    if bad.size:
        raise fail(report, linenos[bad[0]], f"expected an integer in column {column!r}, found {values[bad[0]]!r}")
    return numbers.astype(np.int64)


def _ranks(report: Report, linenos: list[int], values: Sequence[str]) -> np.ndarray:
    """Rank column: integers, -1 for the ``*`` aggregate rows."""
    text = np.asarray(values, dtype=object)
    star = text == "*"
    out = np.full(len(values), -1, dtype=np.int64)
    if (~star).any():
        keep = np.flatnonzero(~star)
        out[keep] = _integers(report, [linenos[i] for i in keep], list(text[keep]), "Rank")
    return out


def _columns(rows: list[list[str]], ncols: int) -> list[list[str]]:
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(ncols)]


def _task_times(report: Report) -> pd.DataFrame:
    """MPI Time section: AppTime, MPITime [s] per rank (index rank, -1 = ``*``; ``line`` when read by line)."""
    section = report.sections.get("task")
    if section is None:
        raise fail(report, None, "expected an '@--- MPI Time (seconds)' section in a verbose report")
    columns = ("Task", "AppTime", "MPITime", "MPI%")
    _check_header(report, section, columns)
    fast = parse(section, columns, integers=("Task",), star="Task")
    if fast is not None:
        frame = pd.DataFrame({"app": fast["AppTime"].to_numpy(), "mpi": fast["MPITime"].to_numpy()},
                             index=pd.Index(np.nan_to_num(fast["Task"].to_numpy(), nan=-1).astype(np.int64),
                                            name="rank"))
        if frame.index.is_unique:
            return frame
    linenos, rows = _tokens(report, section, 4)
    task, app, mpi, _pct = _columns(rows, 4)
    frame = pd.DataFrame({
        "app": _numbers(report, linenos, app, "AppTime"),
        "mpi": _numbers(report, linenos, mpi, "MPITime"),
        "line": linenos,
    }, index=pd.Index(_ranks(report, linenos, task), name="rank"))
    if not frame.index.is_unique:
        raise fail(report, linenos[int(np.argmax(frame.index.duplicated()))], "a task appears twice in MPI Time")
    return frame


def _site_arrays(report: Report, key: str, columns: Sequence[str]) -> dict[str, Any] | None:
    """A verbose per-rank call-site table (time or bytes) as column arrays (rank -1 = ``*``), or None.

    Columns ``function`` (``MPI_Xxx`` per row), ``fcode`` (its index in ``fnames``), ``site``,
    ``pair`` (index of the row's (function, site)), ``rank``, ``count`` and the statistics columns;
    ``key`` names the section, and ``line_no`` the line of each row when it was read line by line.
    """
    section = report.sections.get(key)
    if section is None:
        return None
    _check_header(report, section, columns)
    fast = parse(section, columns, text="Name", integers=("Site", "Rank", "Count"), star="Rank")
    if fast is not None:
        codes, names = _run_codes(fast["Name"].to_numpy())
        fnames = np.array(["MPI_" + name for name in names], dtype=object)
        out: dict[str, Any] = {
            "key": key, "fnames": fnames, "fcode": codes,
            "site": fast["Site"].to_numpy().astype(np.int64),
            "rank": np.nan_to_num(fast["Rank"].to_numpy(), nan=-1).astype(np.int64),
            "count": fast["Count"].to_numpy(),
            **{name: fast[name].to_numpy() for name in columns[4:]},
        }
        out["function"], out["pair"] = fnames[codes], _pair_ids(codes, out["site"])
        _check_names(report, out)
        if not _duplicated(out):
            return out
    linenos, rows = _tokens(report, section, len(columns))
    cols = dict(zip(columns, _columns(rows, len(columns)), strict=True))
    fcode, fnames = pd.factorize(np.array(["MPI_" + name for name in cols["Name"]], dtype=object))
    out = {
        "key": key, "fnames": np.asarray(fnames, dtype=object), "fcode": fcode.astype(np.int64),
        "site": _integers(report, linenos, cols["Site"], "Site"),
        "rank": _ranks(report, linenos, cols["Rank"]),
        "count": _integers(report, linenos, cols["Count"], "Count").astype(np.float64),
        "line_no": np.asarray(linenos, dtype=np.int64),
    }
    out["function"], out["pair"] = out["fnames"][fcode], _pair_ids(out["fcode"], out["site"])
    _check_names(report, out)
    for name in columns[4:]:
        out[name] = _numbers(report, linenos, cols[name], name)
    _check_unique(report, out, section.title)
    return out


def _run_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values)`` (codes as int64) hashing only where the value changes (rows come in runs)."""
    if not values.size:
        return np.zeros(0, dtype=np.int64), values
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    codes, uniques = pd.factorize(values[starts])
    return np.repeat(codes.astype(np.int64), np.diff(np.append(starts, values.size))), uniques


def _pair_ids(fcode: np.ndarray, site: np.ndarray) -> np.ndarray:
    """Index of each row's (function, site), numbered in order of first appearance."""
    if not site.size:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], (fcode[1:] != fcode[:-1]) | (site[1:] != site[:-1]))))
    f, s = fcode[starts], site[starts]
    span = int(s.max()) - int(s.min()) + 1
    if float(span) * (int(f.max()) + 1) < 2.0**62:
        runs = pd.factorize(f * span + (s - s.min()))[0]
    else:  # site IDs too far apart for one integer key
        runs = pd.MultiIndex.from_arrays([f, s]).factorize()[0]
    return np.repeat(runs.astype(np.int64), np.diff(np.append(starts, site.size)))


_NAME = re.compile(r"MPI_[A-Za-z][A-Za-z0-9_]{0,63}")


def _check_names(report: Report, rows: dict[str, Any]) -> None:
    """Refuse a function name that is not an MPI identifier (a flipped byte, binary data), naming its first row."""
    bad = [k for k, name in enumerate(rows["fnames"]) if not _NAME.fullmatch(name)]
    if bad:
        i = int(np.argmax(rows["fcode"] == bad[0]))
        name = str(rows["fnames"][bad[0]])[4:]
        raise fail(report, _row_line(report, rows, i), f"expected an MPI function name (letters, digits and '_' "
                                                       f"after MPI_), found {name[:40]!r}")


def _duplicated(rows: dict[str, Any]) -> bool:
    """True if some (function, site, rank) appears twice (rows in mpiP's order are checked in O(n))."""
    pair, rank = rows["pair"], rows["rank"]
    if not rank.size:
        return False
    span = int(rank.max()) - int(rank.min()) + 2
    if float(span) * (int(pair.max()) + 1) < 2.0**62:
        key = pair * span + np.where(rank < 0, span - 1, rank - rank.min())  # '*' rows last, as mpiP prints them
        if (np.diff(key) > 0).all():
            return False
    return bool(pd.DataFrame({"p": pair, "r": rank}).duplicated().any())


def _check_unique(report: Report, rows: dict[str, Any], what: str) -> None:
    """Each (function, site, rank) at most once in a table read line by line."""
    keys = list(zip(rows["function"], rows["site"].tolist(), rows["rank"].tolist(), strict=True))
    if len(set(keys)) != len(keys):
        seen: set[tuple[str, int, int]] = set()
        for key, lineno in zip(keys, rows["line_no"].tolist(), strict=True):
            if key in seen:
                raise fail(report, lineno, f"site {key[1]} rank {key[2]} appears twice in {what!r}")
            seen.add(key)


def _row_line(report: Report, rows: dict[str, Any], i: int) -> int:
    """Line number of row ``i`` of a call-site table (found in the section's text when read fast)."""
    if "line_no" in rows:
        return int(rows["line_no"][i])
    return report.sections[rows["key"]].rows[i][0]


def _concise_rows(report: Report, key: str) -> pd.DataFrame | None:
    """A concise call-site table (Tasks, Max/Mean/Min per task, MaxRnk/MinRnk), or None."""
    section = report.sections.get(key)
    if section is None:
        return None
    _check_header(report, section, _CONCISE_COLUMNS)
    linenos, rows = _tokens(report, section, len(_CONCISE_COLUMNS))
    cols = dict(zip(_CONCISE_COLUMNS, _columns(rows, len(_CONCISE_COLUMNS)), strict=True))
    frame = pd.DataFrame({
        "function": ["MPI_" + name for name in cols["Name"]],
        "site": _integers(report, linenos, cols["Site"], "Site"),
        "tasks": _integers(report, linenos, cols["Tasks"], "Tasks"),
    })
    for name in ("Max", "Mean", "Min"):
        frame[name] = _numbers(report, linenos, cols[name], name)
    frame["MaxRnk"] = _integers(report, linenos, cols["MaxRnk"], "MaxRnk")
    frame["MinRnk"] = _integers(report, linenos, cols["MinRnk"], "MinRnk")
    if frame.duplicated(["function", "site"]).any():
        row = int(np.argmax(frame.duplicated(["function", "site"]).to_numpy()))
        raise fail(report, linenos[row], f"call site {frame['site'].iloc[row]} appears twice in {section.title!r}")
    return frame


def _callsite_locations(report: Report) -> dict[int, tuple[str, str, int, str, str]]:
    """Callsites section: site ID -> (MPI call, file, line or -1, parent, stack with level 0 first)."""
    section = report.sections.get("callsites")
    if section is None:
        return {}
    _check_header(report, section, ("ID", "Lev", "File/Address", "Line", "Parent_Funct", "MPI_Call"))
    sites: dict[int, list[Any]] = {}
    last: int | None = None
    for lineno, text in section.rows:
        match = _CALLSITE_ROW.match(text)
        if match is None:
            raise fail(report, lineno, "expected 'ID Lev File/Address [Line] Parent_Funct [MPI_Call]' call-site row")
        site, level, file, line, rest = match.groups()
        site, level = int(site), int(level)
        frame = f"{file}:{line}" if line else file
        if level == 0:
            parent, _, call = rest.rpartition(" ")
            if not parent.strip():
                raise fail(report, lineno, "expected Parent_Funct and MPI_Call at stack level 0")
            if site in sites:
                raise fail(report, lineno, f"call site {site} is listed twice")
            parent = parent.strip()
            sites[site] = ["MPI_" + call, file, int(line) if line else -1, parent, [f"{parent} ({frame})"]]
            last = site
        elif site != last:
            raise fail(report, lineno, f"stack level {level} of call site {site} does not follow its level 0 row")
        else:
            sites[site][4].append(f"{rest} ({frame})")
    if section.declared is not None and section.declared != len(sites):
        report.warnings.append(f"line {section.line}: {section.declared} call sites announced, {len(sites)} listed")
    return {site: (*v[:4], " < ".join(v[4])) for site, v in sites.items()}


def _histogram(report: Report, key: str) -> dict[str, Any] | None:
    """``-y`` / ``-p`` histogram rows: function, percent, comm bin and data-size bin lower edges."""
    section = report.sections.get(key)
    if section is None:
        return None
    _check_header(report, section, _HIST_COLUMNS[key])
    linenos, rows = _tokens(report, section, 8)
    call, pct, comm_lo, _d1, comm_hi, size_lo, _d2, size_hi = _columns(rows, 8)
    return {
        "function": np.array(["MPI_" + c for c in call], dtype=object),
        "pct": np.asarray(_numbers(report, linenos, pct, "MPI %"), dtype=np.float64),
        "comm_bin": np.asarray(_integers(report, linenos, comm_lo, "Comm Size"), dtype=np.float64),
        "comm_hi": np.asarray(_integers(report, linenos, comm_hi, "Comm Size"), dtype=np.float64),
        "size_bin": np.asarray(_integers(report, linenos, size_lo, "Data Size"), dtype=np.float64),
        "size_hi": np.asarray(_integers(report, linenos, size_hi, "Data Size"), dtype=np.float64),
    }


def _aggregate_time(report: Report) -> dict[str, Any] | None:
    """Aggregate Time (top twenty): site totals [ms]; columns vary with version (Count) and COV."""
    section = report.sections.get("agg_time")
    if section is None or section.header_text is None:
        return None
    text = section.header_text
    names = tuple(text.split())
    if names[:5] != ("Call", "Site", "Time", "App%", "MPI%") or not set(names[5:]) <= {"Count", "COV"}:
        raise fail(report, section.header_line,
                   f"expected columns Call Site Time App% MPI% [Count] [COV], found {text.strip()!r}")
    linenos, rows = _tokens(report, section, len(names))
    cols = dict(zip(names, _columns(rows, len(names)), strict=True))
    return {
        "function": ["MPI_" + c for c in cols["Call"]],
        "site": _integers(report, linenos, cols["Site"], "Site"),
        "time": _numbers(report, linenos, cols["Time"], "Time"),
        "line_no": np.asarray(linenos, dtype=np.int64),
    }


def _aggregate_bytes(report: Report, key: str) -> None:
    """Check the shape of a top-twenty bytes table (its content repeats the call-site tables)."""
    section = report.sections.get(key)
    if section is None or section.header_text is None:
        return
    linenos, rows = _tokens(report, section, 6)
    cols = _columns(rows, 6)
    for name, values in zip(("Site", "Count", "Total", "Avrg", "%"), cols[1:], strict=True):
        _numbers(report, linenos, values, name)


# ---------------------------------------------------------------- verbose reports


def _verbose_site_table(report: Report) -> pd.DataFrame:
    """Per-rank and ``*`` rows of the time and bytes call-site tables, joined on (function, site, rank)."""
    time = _site_arrays(report, "cs_time", _TIME_COLUMNS)
    keys = ["function", "site", "rank"]
    if time is None:
        table = _empty(function=object, site=np.int64, rank=np.int64)
    else:
        table = pd.DataFrame({
            **{k: time[k] for k in keys},
            "count": time["count"].astype(np.int64),
            "time": time["count"] * time["Mean"] / 1e3,
            "time_max": time["Max"] / 1e3, "time_mean": time["Mean"] / 1e3, "time_min": time["Min"] / 1e3,
            "app_pct": time["App%"], "mpi_pct": time["MPI%"],
        })
    for kind in _BYTES_KINDS:
        rows = _site_arrays(report, f"cs_{kind}", _BYTES_COLUMNS)
        if rows is None:
            continue
        part = pd.DataFrame({
            **{k: rows[k] for k in keys}, f"{kind}_count": rows["count"].astype(np.int64), f"bytes_{kind}": rows["Sum"],
            f"{kind}_max": rows["Max"], f"{kind}_mean": rows["Mean"], f"{kind}_min": rows["Min"],
        })
        table = table.merge(part, on=keys, how="outer")
    table["aggregate"] = table["rank"] == -1
    table["rank"] = table["rank"].astype("Int64").mask(table["aggregate"])
    return table


def _empty(**dtypes: Any) -> pd.DataFrame:
    """An empty DataFrame with typed columns (so that merges on them work)."""
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in dtypes.items()})


def _with_locations(report: Report, table: pd.DataFrame) -> pd.DataFrame:
    """Add file, line, parent and stack of each call site (NaN/empty with ``-k 0``)."""
    columns = ["site", "function", "file", "line", "parent", "stack"]
    rows = [(site, *values) for site, values in _callsite_locations(report).items()]
    locations = pd.DataFrame(rows, columns=columns) if rows else _empty(
        site=np.int64, function=object, file=object, line=np.int64, parent=object, stack=object)
    table = table.merge(locations, on=["site", "function"], how="left")
    table["line"] = table["line"].astype("Int64").mask(table["line"] < 0)
    first = ["site", "function", "rank", "file", "line", "parent", "stack"]
    ordered = first + [c for c in table.columns if c not in first]
    return table[ordered].sort_values(["function", "site", "rank"], na_position="last").reset_index(drop=True)


def _verbose_dataset(report: Report, user: dict[str, Any]) -> xr.Dataset:
    tasks = _task_times(report)
    per_rank = tasks.drop(index=-1, errors="ignore").sort_index()
    ranks = per_rank.index.to_numpy()
    _check_task_sum(report, tasks)
    time = _site_arrays(report, "cs_time", _TIME_COLUMNS)
    if time is None:
        report.warnings.append("no Callsite Time statistics section (made with -d?): per-function values are NaN")
    tables = {kind: _site_arrays(report, f"cs_{kind}", _BYTES_COLUMNS) for kind in _BYTES_KINDS}
    tables = {"time": time, **{k: v for k, v in tables.items() if v is not None}}
    _check_sites(report, tables)
    _check_aggregate_time(report, time)
    for key in ("agg_sent", "agg_io", "agg_rma"):
        _aggregate_bytes(report, key)
    named = {str(f) for rows in tables.values() if rows is not None for f in rows["fnames"]}
    functions = sorted(named | _histogram_functions(report))
    report.source.release()  # every section is read: the cube is built without the file's bytes
    metrics = [*METRICS, "time_max", "time_min", *(f"bytes_{k}" for k in ("io", "rma") if k in tables)]
    cube = _rank_cube(report, tables, ranks, functions, metrics)
    _check_rank_sums(report, time, ranks, per_rank, cube[:, :, metrics.index("time")])
    compute_row = np.full((len(ranks), 1, len(metrics)), np.nan)
    compute_row[:, 0, metrics.index("time")] = (per_rank["app"] - per_rank["mpi"]).to_numpy()
    functions, cube = [*functions, COMPUTE], np.concatenate([cube, compute_row], axis=1)
    units = {"time_max": "s", "time_min": "s", "bytes_io": "B", "bytes_rma": "B"}
    file_meta = {"nprocs": len(ranks), "elapsed": float(per_rank["app"].max()) if len(ranks) else None}
    ds = make_run(cube, ranks=ranks, functions=functions, metrics=metrics, extra_units=units,
                  run=_run_metadata(report, file_meta, user), warnings=report.warnings, reader=READER)
    ds = _add_histograms(report, ds)
    ds.attrs.update(_header_attrs(report, "verbose"))
    return ds


def _cells(report: Report, rows: dict[str, Any], ranks: np.ndarray, functions: list[str]) -> np.ndarray:
    """Flat index of each row's (rank, function) cell in a ranks x functions plane; ``*`` rows get
    the index just past the plane."""
    r = _rank_index(ranks, rows["rank"])
    unknown = np.flatnonzero((r < 0) & (rows["rank"] >= 0))
    if unknown.size:
        raise fail(report, _row_line(report, rows, int(unknown[0])), "rank absent from the MPI Time section")
    position = {name: i for i, name in enumerate(functions)}
    f = np.array([position[name] for name in rows["fnames"]], dtype=np.int64)[rows["fcode"]]
    return np.where(r >= 0, r * len(functions) + f, len(ranks) * len(functions))


def _rank_index(ranks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index in ``ranks`` (sorted, unique) of each of ``values``, -1 for a value not in it."""
    if len(ranks) and ranks[0] == 0 and ranks[-1] == len(ranks) - 1:  # ranks 0..n-1: a rank is its index
        return np.where(values < len(ranks), values, -1)
    r = np.searchsorted(ranks, values).clip(max=max(len(ranks) - 1, 0))
    return np.where(ranks[r] == values, r, -1) if len(ranks) else np.full(len(values), -1)


def _rank_cube(report: Report, tables: dict[str, dict[str, Any] | None], ranks: np.ndarray,
               functions: list[str], metrics: list[str]) -> np.ndarray:
    """(rank, function, metric) sums over call sites of the per-rank rows (NaN where unknown)."""
    cube = np.full((len(ranks), len(functions), len(metrics)), np.nan)
    shape = (len(ranks), len(functions))
    time = tables["time"]
    if time is None:
        return cube

    size = shape[0] * shape[1]

    def plane_sum(cells: np.ndarray, values: np.ndarray) -> np.ndarray:
        return np.bincount(cells, weights=values, minlength=size + 1)[:size].reshape(shape)

    cells = _cells(report, time, ranks, functions)
    for metric, values in (("time", time["count"] * time["Mean"] / 1e3), ("calls", time["count"])):
        cube[:, :, metrics.index(metric)] = plane_sum(cells, values)
    for metric, column, op, start in (("time_max", "Max", np.fmax, -np.inf), ("time_min", "Min", np.fmin, np.inf)):
        plane = np.full(size + 1, start)
        op.at(plane, cells, time[column] / 1e3)
        plane[np.isinf(plane)] = np.nan
        cube[:, :, metrics.index(metric)] = plane[:size].reshape(shape)
    cube[:, :, metrics.index("bytes_sent")] = cube[:, :, metrics.index("calls_sent")] = 0.0  # no section: none sent
    for kind in ("sent", "io", "rma"):
        if kind in tables:
            bcells = _cells(report, tables[kind], ranks, functions)
            for metric, column in ((f"bytes_{kind}", "Sum"), ("calls_sent", "count")):
                if metric in metrics and (kind == "sent" or metric != "calls_sent"):
                    cube[:, :, metrics.index(metric)] = plane_sum(bcells, tables[kind][column])
    timed = np.isin(functions, time["fnames"])
    timing = [metrics.index(m) for m in ("time", "calls", "time_max", "time_min")]
    cube[np.ix_(np.arange(len(ranks)), np.flatnonzero(~timed), timing)] = np.nan  # no time rows: unknown
    _blank_hidden(report, time, ranks, functions, metrics, cube)
    return cube


def _blank_hidden(report: Report, time: dict[str, Any], ranks: np.ndarray, functions: list[str],
                  metrics: list[str], cube: np.ndarray) -> None:
    """NaN the time/calls of ranks absent from a site whose ``*`` row counts calls not shown (``-t``)."""
    pair, count = time["pair"], time["count"]
    stars = np.flatnonzero(time["rank"] < 0)
    if not stars.size:
        return
    pairs = int(pair.max()) + 1
    shown = np.bincount(pair, weights=count, minlength=pairs) - np.bincount(pair[stars], count[stars], pairs)
    for i in stars[count[stars] > shown[pair[stars]]]:
        function, site = time["function"][i], int(time["site"][i])
        present = time["rank"][(pair == pair[i]) & (time["rank"] >= 0)]
        absent = np.setdiff1d(ranks, present)
        rows = np.searchsorted(ranks, absent)
        for metric in ("time", "calls", "time_max", "time_min"):
            cube[rows, functions.index(function), metrics.index(metric)] = np.nan
        report.warnings.append(f"site {site} ({function}): rank rows hidden by the print threshold (-t); "
                               f"{function} of ranks {absent.tolist()} set to NaN")


def _check_task_sum(report: Report, tasks: pd.DataFrame) -> None:
    """Warn when the MPI Time ``*`` row disagrees with the sum of the rank rows."""
    if -1 not in tasks.index:
        report.warnings.append("MPI Time section has no '*' row")
        return
    ranks = tasks.drop(index=-1)
    for column in ("app", "mpi"):
        total = ranks[column].sum()
        star = tasks.loc[-1, column]
        floor = _fixed_floor(report)
        tol = _half_ulp(np.array([star]), floor=floor)[0] + _half_ulp(ranks[column].to_numpy(), floor=floor).sum()
        if abs(total - star) > tol:
            report.warnings.append(f"line {_star_line(report, tasks)}: '*' {column} time {star} differs from "
                                   f"the sum of the ranks {total:.6g}")


def _star_line(report: Report, tasks: pd.DataFrame) -> int:
    """Line of the ``*`` row of the MPI Time section (found in its text when it was read fast)."""
    row = int(tasks.index.get_loc(-1))
    return int(tasks["line"].iloc[row]) if "line" in tasks else report.sections["task"].rows[row][0]


def _check_rank_sums(report: Report, time: dict[str, Any] | None, ranks: np.ndarray,
                     per_rank: pd.DataFrame, cube_time: np.ndarray) -> None:
    """Warn when a rank's summed call-site time disagrees with its MPITime beyond print precision."""
    if time is None or not len(ranks):
        return
    mask = time["rank"] >= 0
    r = _rank_index(ranks, time["rank"][mask])
    floor = _fixed_floor(report)
    weights = time["count"][mask] * _half_ulp(time["Mean"][mask], floor=floor) / 1e3
    slack = np.bincount(r, weights=weights, minlength=len(ranks))
    mpi = per_rank["mpi"].to_numpy()
    total = np.nansum(cube_time, axis=1)
    off = (np.abs(total - mpi) > _half_ulp(mpi, floor=floor) + slack) & ~np.isnan(cube_time).any(axis=1)
    for i in np.flatnonzero(off):
        report.warnings.append(f"rank {ranks[i]}: call-site times sum to {total[i]:.4g} s, MPI Time says {mpi[i]} s")


def _check_sites(report: Report, tables: dict[str, dict[str, Any] | None]) -> None:
    """Warn when statistics rows name another MPI call for a site than the Callsites section."""
    calls = {site: values[0] for site, values in _callsite_locations(report).items()}
    if not calls:
        return
    pairs = set()
    for rows in tables.values():
        if rows is not None:
            first = np.unique(rows["pair"], return_index=True)[1]
            pairs |= set(zip(rows["site"][first].tolist(), rows["function"][first], strict=True))
    for site in sorted({site for site, function in pairs if calls.get(site, function) != function}):
        report.warnings.append(f"call site {site}: statistics rows name another MPI call than the Callsites "
                               "section (kept, keyed by call and site)")


def _check_aggregate_time(report: Report, time: dict[str, Any] | None) -> None:
    """Warn when a top-twenty Aggregate Time entry disagrees with the call-site ``*`` rows."""
    agg = _aggregate_time(report)
    if agg is None or time is None:
        return
    star = time["rank"] < 0
    floor = _fixed_floor(report)
    keys = zip(time["function"][star], time["site"][star].tolist(), strict=True)
    # count x Mean carries count x (half a unit in the last printed place of the mean) of rounding:
    # with -e (three decimals) a 0.0004 ms mean prints 0.000 and 3,000 calls lose 1.2 ms.
    slack = time["count"][star] * _half_ulp(time["Mean"][star], floor=floor)
    totals = dict(zip(keys, zip((time["count"][star] * time["Mean"][star]).tolist(), slack.tolist(), strict=True),
                      strict=True))
    for function, site, value, lineno in zip(agg["function"], agg["site"].tolist(), agg["time"].tolist(),
                                             agg["line_no"].tolist(), strict=True):
        mine, rounding = totals.get((function, site), (None, 0.0))
        tol = _half_ulp(np.array([value]), floor=floor)[0] + rounding + 1e-9 * abs(value)
        if mine is not None and abs(mine - value) > tol:
            report.warnings.append(f"line {lineno}: Aggregate Time of site {site} ({value} ms) differs "
                                   f"from its call-site total ({mine:.4g} ms)")


def _half_ulp(values: np.ndarray, digits: int = 3, floor: float = 0.0) -> np.ndarray:
    """Half a unit in the last place of numbers printed with ``digits`` significant digits
    (at least ``floor``: half the last place of ``-e`` fixed-point numbers, 5e-4)."""
    values = np.abs(np.asarray(values, dtype=np.float64))
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log10(np.where(values > 0, values, 1.0)))
    return np.maximum(np.where(values > 0, 0.5 * 10.0 ** (exponent - digits + 1), 0.0), floor)


def _fixed_floor(report: Report) -> float:
    """5e-4 when the report prints fixed-point numbers (``-e``: three decimals), else 0."""
    options = report.header.get("MPIP env var", (0, ""))[1]
    return 5e-4 if re.search(r"(^|[\s,])-e\b", options) else 0.0


# ---------------------------------------------------------------- concise reports


def _concise_task_times(report: Report) -> dict[str, dict[str, float]]:
    """Task Time Statistics: {"app"/"mpi": {stat: seconds}} and {"rank_max"/"rank_min": ...}."""
    section = report.sections.get("task_concise")
    if section is None:
        raise fail(report, None, "expected an '@--- Task Time Statistics (seconds)' section in a concise report")
    _check_header(report, section, ("AppTime", "MPITime", "MPI%", "App", "Task", "MPI", "Task"))
    widths = {"Max": 5, "Mean": 3, "Min": 5, "Stddev": 3, "Aggregate": 4}
    out: dict[str, dict[str, float]] = {"app": {}, "mpi": {}, "rank_max": {}, "rank_min": {}, "pct": {}}
    for lineno, text in section.rows:
        fields = text.split()
        label = fields[0] if fields else ""
        if label not in widths or len(fields) != widths[label]:
            raise fail(report, lineno, f"expected a {'/'.join(widths)} row, found {text.strip()!r}")
        app, mpi = _numbers(report, [lineno] * 2, fields[1:3], "AppTime/MPITime")
        stat = {"Aggregate": "total", "Stddev": "stddev"}.get(label, label.lower())
        out["app"][stat], out["mpi"][stat] = float(app), float(mpi)
        if label == "Aggregate":
            out["pct"]["mpi"] = float(_numbers(report, [lineno], fields[3:4], "MPI%")[0])
        if label in ("Max", "Min"):
            app_rank, mpi_rank = _integers(report, [lineno] * 2, fields[3:5], "Task")
            out[f"rank_{stat}"].update(app=float(app_rank), mpi=float(mpi_rank))
    return out


def _concise_site_table(report: Report) -> pd.DataFrame:
    """Concise call-site rows (time in s, bytes in B), one per site."""
    time = _concise_rows(report, "cs_time_concise")
    keys = ["function", "site"]
    table = _empty(function=object, site=np.int64) if time is None else pd.DataFrame({
        **{k: time[k] for k in keys}, "tasks": time["tasks"],
        "time_total": time["Mean"] * time["tasks"] / 1e3,
        "time_task_max": time["Max"] / 1e3, "time_task_mean": time["Mean"] / 1e3, "time_task_min": time["Min"] / 1e3,
        "time_rank_of_max": time["MaxRnk"], "time_rank_of_min": time["MinRnk"],
    })
    for kind in _BYTES_KINDS:
        rows = _concise_rows(report, f"cs_{kind}_concise")
        if rows is None:
            continue
        part = pd.DataFrame({
            **{k: rows[k] for k in keys}, f"{kind}_tasks": rows["tasks"],
            f"bytes_{kind}_total": rows["Mean"] * rows["tasks"],
            f"bytes_{kind}_task_max": rows["Max"], f"bytes_{kind}_task_mean": rows["Mean"],
            f"bytes_{kind}_task_min": rows["Min"],
            f"bytes_{kind}_rank_of_max": rows["MaxRnk"], f"bytes_{kind}_rank_of_min": rows["MinRnk"],
        })
        table = table.merge(part, on=keys, how="outer")
    table["rank"] = pd.array([pd.NA] * len(table), dtype="Int64")
    table["aggregate"] = True
    return table


def _concise_nprocs(report: Report, task: dict[str, dict[str, float]], user: dict[str, Any]) -> int:
    """Number of ranks: Aggregate / Mean AppTime, else user metadata, else the largest rank named + 1."""
    total, mean = task["app"].get("total", np.nan), task["app"].get("mean", np.nan)
    if mean > 0 and abs(total / mean - round(total / mean)) < 1e-3 * max(1.0, total / mean):
        return round(total / mean)
    if user.get("nprocs") not in (None, ""):
        return int(float(user["nprocs"]))
    named = [int(v) for v in (*task["rank_max"].values(), *task["rank_min"].values())]
    report.warnings.append("rank count not stated by the concise report: ranks 0..largest rank named")
    return max(named, default=0) + 1


def _concise_dataset(report: Report, user: dict[str, Any]) -> xr.Dataset:
    task = _concise_task_times(report)
    nprocs = _concise_nprocs(report, task, user)
    table = _concise_site_table(report)
    functions = [*sorted(set(table["function"]) | _histogram_functions(report)), COMPUTE]
    metrics = [*METRICS, "bytes_io", "bytes_rma"]
    cube = np.full((nprocs, len(functions), len(metrics)), np.nan)
    file_meta = {"nprocs": nprocs, "elapsed": task["app"].get("max"), "detail": "summary"}
    report.warnings.append(_concise_note(task))
    ds = make_run(cube, ranks=range(nprocs), functions=functions, metrics=metrics,
                  extra_units={"bytes_io": "B", "bytes_rma": "B"},
                  run=_run_metadata(report, file_meta, user), warnings=report.warnings, reader=READER)
    ds = ds.assign_coords(stat=list(STATS), task_metric=["app", "mpi"], task_stat=list(TASK_STATS))
    ds = ds.assign(_concise_summary(table, functions, metrics, task, nprocs))
    ds = ds.assign(_task_time_vars(task))
    ds = _add_histograms(report, ds)
    ds.attrs.update(_header_attrs(report, "concise"))
    return ds


def _concise_note(task: dict[str, dict[str, float]]) -> str:
    """The read warning of a concise report: what it states and what is unavailable."""
    mpi, app, pct = task["mpi"].get("mean", np.nan), task["app"].get("mean", np.nan), task["pct"].get("mpi", np.nan)
    return ("concise report (-c): per-rank times of MPI functions and of Compute are not in the file, so "
            "profile is NaN (unavailable; run coordinate detail='summary'); what it states over ranks is in "
            f"task_time, summary and mpi_pct: mean MPI time {mpi:.6g} s of {app:.6g} s per rank, "
            f"MPI {pct:.2f}% of the aggregate time as printed")


def _concise_summary(table: pd.DataFrame, functions: list[str], metrics: list[str],
                     task: dict[str, dict[str, float]], nprocs: int) -> dict[str, Any]:
    """``summary`` and ``rank_of_max``/``rank_of_min`` over ranks per function (see module doc)."""
    summary = np.full((1, len(functions), len(metrics), len(STATS)), np.nan)
    rank_max = np.full((1, len(functions), len(metrics)), np.nan)
    rank_min = np.full_like(rank_max, np.nan)
    sources = {"time": "time", "bytes_sent": "bytes_sent", "bytes_io": "bytes_io", "bytes_rma": "bytes_rma"}
    for metric, prefix in sources.items():
        if f"{prefix}_total" not in table.columns:
            continue
        m = metrics.index(metric)
        for function, sites in table.dropna(subset=[f"{prefix}_total"]).groupby("function"):
            f = functions.index(function)
            total = sites[f"{prefix}_total"].sum()
            summary[0, f, m, :2] = total, total / nprocs
            if len(sites) == 1:
                summary[0, f, m, 2:] = sites[f"{prefix}_task_max"].iloc[0], sites[f"{prefix}_task_min"].iloc[0]
                rank_max[0, f, m] = sites[f"{prefix}_rank_of_max"].iloc[0]
                rank_min[0, f, m] = sites[f"{prefix}_rank_of_min"].iloc[0]
    c, t = functions.index(COMPUTE), metrics.index("time")
    summary[0, c, t, :2] = (task["app"].get("total", np.nan) - task["mpi"].get("total", np.nan),
                            task["app"].get("mean", np.nan) - task["mpi"].get("mean", np.nan))
    dims = ("run", "function", "metric")
    return {
        "summary": ((*dims, "stat"), summary),
        "rank_of_max": (dims, rank_max),
        "rank_of_min": (dims, rank_min),
    }


def _task_time_vars(task: dict[str, dict[str, float]]) -> dict[str, Any]:
    """``task_time`` (run, task_metric, task_stat) [s] and the ranks of its max / min."""
    kinds = ("app", "mpi")
    values = np.array([[[task[k].get(s, np.nan) for s in TASK_STATS] for k in kinds]])
    return {
        "task_time": (("run", "task_metric", "task_stat"), values, {"units": "s"}),
        "mpi_pct": (("run",), np.array([task["pct"].get("mpi", np.nan)]),
                    {"units": "%", "description": "MPI share of the aggregate time, as printed"}),
        "task_rank_of_max": (("run", "task_metric"), np.array([[task["rank_max"].get(k, np.nan) for k in kinds]])),
        "task_rank_of_min": (("run", "task_metric"), np.array([[task["rank_min"].get(k, np.nan) for k in kinds]])),
    }


# ---------------------------------------------------------------- shared pieces


def _add_histograms(report: Report, ds: xr.Dataset) -> xr.Dataset:
    """``-y`` / ``-p`` histograms as (run, function, comm_bin, size_bin) percent variables."""
    tables = []
    for key, name, meaning in (("hist_coll", "coll_time_share", "percent of MPI time in collectives"),
                               ("hist_p2p", "p2p_sent_share", "percent of point-to-point bytes sent")):
        rows = _histogram(report, key)
        if rows is not None and len(rows["pct"]):
            tables.append((name, meaning, rows))
    out = ds
    if tables:
        comm = np.unique(np.concatenate([rows["comm_bin"] for _, _, rows in tables]))
        size = np.unique(np.concatenate([rows["size_bin"] for _, _, rows in tables]))
        functions = pd.Index(ds["function"].values)
        variables = {}
        for name, meaning, rows in tables:
            f = functions.get_indexer(rows["function"])
            keep = f >= 0
            index = (f[keep], np.searchsorted(comm, rows["comm_bin"][keep]),
                     np.searchsorted(size, rows["size_bin"][keep]))
            total = np.zeros((functions.size, comm.size, size.size))
            listed = np.zeros(total.shape, dtype=bool)
            np.add.at(total, index, rows["pct"][keep])
            listed[index] = True
            cube = np.where(listed, total, np.nan)[np.newaxis].repeat(ds.sizes["run"], axis=0)
            variables[name] = xr.Variable(("run", "function", "comm_bin", "size_bin"), cube,
                                          {"units": "%", "description": meaning + " (top twenty; NaN: not listed)"})
        out = ds.assign_coords(comm_bin=comm, size_bin=size).assign(variables)
    out.attrs["warnings"] = json.dumps(report.warnings)
    return out


def _histogram_functions(report: Report) -> set[str]:
    """Functions named by the ``-y`` / ``-p`` histograms (they get a place on ``function``)."""
    found: set[str] = set()
    for key in _HIST_COLUMNS:
        rows = _histogram(report, key)
        found |= set() if rows is None else set(rows["function"])
    return found


def _run_metadata(report: Report, file_meta: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """File facts over user metadata; nodes and ppn from the task assignment when stated."""
    facts = {**file_meta, "format": "mpip"}
    if report.hosts:
        per_host = pd.Series(list(report.hosts.values())).value_counts()
        facts["nodes"] = len(per_host)
        if per_host.nunique() == 1:
            facts["ppn"] = int(per_host.iloc[0])
    facts = {k: v for k, v in facts.items() if v is not None}
    for name, value in facts.items():
        given = user.get(name)
        if given not in (None, "") and name != "format" and str(given) != str(value):
            try:
                same = float(given) == float(value)
            except (TypeError, ValueError):
                same = False
            if not same:
                report.warnings.append(f"{name}={given!r} given but the report states {value!r}: using the report")
    return {**user, **facts}


def _header_attrs(report: Report, style: str) -> dict[str, str]:
    """Report header facts as ``mpip_*`` string attributes."""
    names = {"Command": "command", "Version": "version", "Start time": "start", "Stop time": "stop",
             "MPIP env var": "options", "Timer Used": "timer", "Report generation": "generation",
             "Collector PID": "pid", "Collector Rank": "collector_rank"}
    attrs = {f"mpip_{short}": report.header[key][1] for key, short in names.items() if key in report.header}
    attrs["mpip_style"] = style
    if report.hosts:
        attrs["mpip_hosts"] = json.dumps([report.hosts[r] for r in sorted(report.hosts)])
    return attrs
