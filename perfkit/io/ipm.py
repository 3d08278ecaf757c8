"""IPM XML profiles (IPM 0.98x and 2.0.x logs) -> the canonical perfkit Dataset.

One ``<task>`` per rank. Per rank and function: ``time`` [s], ``calls`` and ``bytes`` [B] from
``<func>``; ``bytes_sent``/``calls_sent`` for send calls and ``bytes_recv``/``calls_recv`` for
receive calls; ``Compute`` = ``perf@wtime - perf@mtime`` [s]. The ``<hash>`` entries (full logs)
give the rank-to-rank ``traffic`` of point-to-point calls and the message-size histogram ``sizes``.
``traffic`` is numpy or ``sparse.COO`` by its number of non-zeros (``perfkit.model.dense_traffic``:
dense up to 4 MiB, or when at least a quarter of the sender x receiver x quantity elements are
non-zero), whatever the rank count.
See ``docs/formats/ipm.md`` for the format as this reader understands it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any
from xml.etree import ElementTree
from xml.etree.ElementTree import ParseError

import numpy as np
import xarray as xr
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from perfkit.errors import PerfkitFormatError
from perfkit.model import COMPUTE, METRICS, TRAFFIC_QUANTITIES, dense_traffic, make_run, sorted_coo
from perfkit.options import too_big

READER = "perfkit.io.ipm"
ROOT = "ipm_job_profile"
#: Extra profile metric: IPM's own ``bytes`` of a call (buffer size x calls, any direction).
EXTRA_UNITS = {"bytes": "B"}
PROFILE_METRICS = (*METRICS, "bytes")

#: Calls whose ``bytes``/``orank`` describe a message sent to ``orank`` (IPM: DATA_TX).
SEND_CALLS = frozenset({
    "MPI_Send", "MPI_Ssend", "MPI_Rsend", "MPI_Bsend",
    "MPI_Isend", "MPI_Issend", "MPI_Irsend", "MPI_Ibsend",
})
#: Send and receive in one call; IPM keys them by the send part (count, destination) only.
SENDRECV_CALLS = frozenset({"MPI_Sendrecv", "MPI_Sendrecv_replace"})
#: Calls whose ``bytes``/``orank`` describe a message received from ``orank`` (IPM: DATA_RX).
RECV_CALLS = frozenset({"MPI_Recv", "MPI_Irecv"})

#: Partner-rank sentinels in the 30-bit rank field of IPM 2 hexadecimal keys.
#: No number IPM writes reaches this (64-bit counters, times in s): larger ones are corrupt, and summing
#: them could overflow.
TOO_LARGE = 2.0**63
#: Bytes handed to the XML parser at a time.
READ_SIZE = 1 << 22
_RANK_MASK = 0x3FFFFFFF
_RANK_SENTINELS = {_RANK_MASK: "MPI_PROC_NULL", _RANK_MASK - 1: "all ranks", _RANK_MASK - 2: "MPI_ANY_SOURCE"}
_HEX_KEY = re.compile(r"^[0-9A-Fa-f]{32}$")
_VERSION = re.compile(r"^(0\.9\d*|2\.\d+)(\.\d+)*$")
#: Elements read, or known and deliberately not read (documented in docs/formats/ipm.md).
_KNOWN_TAGS = frozenset({
    ROOT, "task", "job", "host", "perf", "regions", "region", "func", "hash", "hent", "env",
    "hpm", "counter", "calltable", "section", "entry", "modules", "module", "switch", "cmdline",
    "ru_s_ti", "ru_s_tf", "ru_c_ti", "ru_c_tf", "call_mask", "internal", "ptrtable", "ptr", "pmon",
    "device", "taskcopy",
})
_OMP_ENV = re.compile(r"^OMP_NUM_THREADS=(\d+)$")
#: ``<hent>`` attributes read, with the value used when one is absent.
_HENT_FIELDS = {"call": "", "bytes": "", "orank": "", "region": "-1", "count": "", "key": ""}
_HENT_GET = itemgetter(*_HENT_FIELDS)


def sniff(path: Path, head: bytes) -> bool:
    """True if ``head`` (the first bytes of ``path``) holds an IPM XML root element."""
    return b"<" + ROOT.encode() in head


# --------------------------------------------------------------------------- parsing


@dataclass
class _Task:
    rank: int
    version: str
    where: str
    ntasks: float = np.nan
    nhosts: float = np.nan
    host: str = ""
    wtime: float = np.nan
    mtime: float = np.nan
    threads: float = np.nan
    nlog: float = np.nan
    nhent: int = 0


@dataclass
class _Parsed:
    """Everything read from one file, as flat columns of strings (one entry per element)."""

    tasks: list[_Task] = field(default_factory=list)
    # regions: task index, label, IPM id ("-1" if absent), parent region row (-1 = top level), times
    reg_task: list[int] = field(default_factory=list)
    reg_label: list[str] = field(default_factory=list)
    reg_id: list[str] = field(default_factory=list)
    reg_parent: list[int] = field(default_factory=list)
    reg_wtime: list[str] = field(default_factory=list)
    reg_mtime: list[str] = field(default_factory=list)
    # <func>: region row, name, count, bytes ("nan" if absent), seconds
    fn_region: list[int] = field(default_factory=list)
    fn_name: list[str] = field(default_factory=list)
    fn_count: list[str] = field(default_factory=list)
    fn_bytes: list[str] = field(default_factory=list)
    fn_time: list[str] = field(default_factory=list)
    # <hent>: call, bytes, orank, region id, count, key, "total min max" (task: via _Task.nhent)
    he_call: list[str] = field(default_factory=list)
    he_bytes: list[str] = field(default_factory=list)
    he_orank: list[str] = field(default_factory=list)
    he_region: list[str] = field(default_factory=list)
    he_count: list[str] = field(default_factory=list)
    he_key: list[str] = field(default_factory=list)
    he_text: list[str] = field(default_factory=list)
    has_hash: bool = False
    unknown_tags: set[str] = field(default_factory=set)
    counters: set[str] = field(default_factory=set)
    stray: int = 0  # <func>/<hent> outside a <region>/<hash>


def _line_count(path: Path) -> int:
    """Number of lines of the file (error path only)."""
    with open(path, "rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b"")) + 1


def _parse(path: Path) -> _Parsed:
    """Stream ``path`` once, reading each ``<task>`` subtree at its end and then clearing it."""
    if path.stat().st_size == 0:
        raise PerfkitFormatError(path, None, "the file is empty")
    with open(path, "rb") as fh:
        head = fh.read(4096)
        first = _first_element(head)
        if first is not None and first != ROOT:
            raise PerfkitFormatError(path, _line_of(path, b"<" + first.encode()),
                                     f"root element is <{first}>, expected <{ROOT}>: not an IPM XML log")
        fh.seek(0)
        try:
            return _walk(path, _streaming_parser(head, first)(_LargeReads(fh)))
        except ParseError as exc:
            line, column = exc.position
            reason = re.sub(r": line \d+, column \d+$", "", str(exc))
            message = f"not well-formed or truncated XML: {reason} (column {column})"
            if line >= _line_count(path):  # the document ends before its elements close
                message = f"truncated at line {line}: the XML ends inside its elements ({reason})"
            raise PerfkitFormatError(path, line, message) from None
        except LookupError as exc:  # an XML declaration naming an encoding Python does not know
            raise PerfkitFormatError(path, _line_of(path, b"encoding="), f"XML declaration: {exc}") from None
        except DefusedXmlException as exc:
            name = getattr(exc, "name", None) or ""
            line = _line_of(path, f"<!ENTITY {name}".encode()) if name else None
            raise PerfkitFormatError(path, line, f"refused: {exc} (entity declarations and external references "
                                                 "are not allowed in IPM logs)") from None


class _LargeReads:
    """``fh`` read ``READ_SIZE`` bytes at a time whatever the parser asks (iterparse asks 16 KiB): expat
    scans a token cut by a read again from its start on each feed, quadratic for a token of megabytes."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh

    def read(self, size: int = -1) -> bytes:
        return self._fh.read(max(size, READ_SIZE))


def _streaming_parser(head: bytes, first: str | None) -> Any:
    """The stdlib C parser when the prolog has no DOCTYPE (so no entity can be declared), else defusedxml.

    Entities and external references can only be declared in a DOCTYPE before the root element; a
    file without one is parsed with ``xml.etree``'s accelerated iterparse, anything else goes through
    defusedxml, which refuses entity declarations and external references.
    """
    if first is not None and b"<!DOCTYPE" not in head[: head.find(b"<" + first.encode())]:
        return ElementTree.iterparse
    return iterparse


_PROLOG = re.compile(rb"<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^\[>]*(\[.*?\])?\s*>|\s+", re.S)
_ELEMENT = re.compile(rb"<([A-Za-z_][\w.:-]*)")


def _first_element(head: bytes) -> str | None:
    """Name of the first element in ``head`` (None if the prolog is longer than ``head``)."""
    pos = 0
    while (m := _PROLOG.match(head, pos)) and m.end() > pos:
        pos = m.end()
    m = _ELEMENT.match(head, pos)
    return m.group(1).decode("ascii", "replace") if m else None


def _walk(path: Path, events: Any) -> _Parsed:
    """The parse loop: only ``<task>`` ends do work; every finished task subtree is cleared."""
    out = _Parsed()
    for _event, elem in events:
        tag = elem.tag
        if tag == "task":
            _read_task(path, out, elem)
            elem.clear()
        elif tag == "calltable":
            elem.clear()
        elif tag not in _KNOWN_TAGS:
            out.unknown_tags.add(tag)
    if events.root.tag != ROOT:
        raise PerfkitFormatError(path, None, f"root element is <{events.root.tag}>, expected <{ROOT}>")
    if not out.tasks:
        raise PerfkitFormatError(path, None, f"/{ROOT} holds no <task> element")
    return out


def _read_task(path: Path, out: _Parsed, elem: Any) -> None:
    where = f"/{ROOT}/task[{len(out.tasks) + 1}]"
    version = elem.get("ipm_version", "")
    if not _VERSION.match(version):
        raise PerfkitFormatError(path, None, f"{where}: ipm_version={version!r} is not a known IPM version (0.9x, 2.x)")
    rank = _int_attr(path, where, elem, "mpi_rank")
    task = _Task(rank=rank, version=version, where=f"{where}[@mpi_rank={rank}]", ntasks=_float(elem.get("mpi_size")))
    out.tasks.append(task)
    for child in elem:
        tag = child.tag
        if tag == "regions":
            _read_regions(out, child, -1)
        elif tag == "hash":
            _read_hash(out, task, child)
        elif tag == "perf":
            task.wtime = _time(path, f"{task.where}/perf", child, "wtime")
            task.mtime = _time(path, f"{task.where}/perf", child, "mtime")
            task.threads = _float(child.get("omp_num_threads"))
        elif tag == "host":
            task.host = (child.text or "").strip()
        elif tag == "job":
            task.ntasks = _float(child.get("ntasks", task.ntasks))
            task.nhosts = _float(child.get("nhosts"))
        elif tag == "env":
            match = _OMP_ENV.match((child.text or "").strip())
            if match and np.isnan(task.threads):
                task.threads = float(match.group(1))
        elif tag in ("func", "hent"):
            out.stray += 1


def _read_regions(out: _Parsed, regions: Any, parent: int) -> None:
    """Rows for every ``<region>`` under ``regions`` (recursively) and their ``<func>`` columns."""
    for region in regions.iterfind("region"):
        row = len(out.reg_label)
        out.reg_task.append(len(out.tasks) - 1)
        out.reg_label.append(region.get("label", ""))
        out.reg_id.append(region.get("id", "-1"))
        out.reg_parent.append(parent)
        out.reg_wtime.append(region.get("wtime"))  # None (absent): NaN, not measured
        out.reg_mtime.append(region.get("mtime"))
        funcs = region.findall("func")
        out.fn_region.extend([row] * len(funcs))
        out.fn_name.extend([f.get("name", "") for f in funcs])
        out.fn_count.extend([f.get("count") for f in funcs])
        out.fn_bytes.extend([f.get("bytes") for f in funcs])
        out.fn_time.extend([f.text or "" for f in funcs])
        out.counters.update(c.get("name", "") for c in region.iter("counter"))
        for sub in region.iterfind("regions"):
            _read_regions(out, sub, row)


def _read_hash(out: _Parsed, task: _Task, hash_elem: Any) -> None:
    out.has_hash = True
    task.nlog = _float(hash_elem.get("nlog"))
    hents = hash_elem.findall("hent")
    task.nhent = len(hents)
    if not hents:
        return
    attrs = [h.attrib for h in hents]
    try:  # fast path: every attribute present, columns transposed in C
        columns = list(zip(*map(_HENT_GET, attrs)))
    except KeyError:
        columns = [[a.get(name, default) for a in attrs] for name, default in _HENT_FIELDS.items()]
    for target, column in zip((out.he_call, out.he_bytes, out.he_orank, out.he_region, out.he_count, out.he_key),
                              columns):
        target.extend(column)
    out.he_text.extend([h.text or "" for h in hents])


def _int_attr(path: Path, where: str, elem: Any, name: str) -> int:
    value = elem.get(name)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise PerfkitFormatError(path, None, f"{where}: attribute {name}={value!r} is not an integer") from None


def _float(value: Any) -> float:
    """Attribute text -> float; NaN when absent or unreadable (callers warn where it matters)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def _time(path: Path, where: str, elem: Any, name: str) -> float:
    """A time attribute [s]: NaN when absent or unreadable, refused when NaN, negative, infinite or too large."""
    value = _float(elem.get(name))
    if name in elem.attrib and not 0 <= value < TOO_LARGE:
        raise PerfkitFormatError(path, None, f"{where}: {name}: expected a non-negative time, found {elem.get(name)!r}")
    return value


def _line_of(path: Path, needle: bytes, limit: int = 1 << 20) -> int | None:
    """1-based line of the first occurrence of ``needle`` in the first ``limit`` bytes."""
    with open(path, "rb") as fh:
        head = fh.read(limit)
    pos = head.find(needle)
    return None if pos < 0 else head.count(b"\n", 0, pos) + 1


def _numbers(path: Path, values: list[str | None], what: str, where: Any, kind: str | None = None) -> np.ndarray:
    """Strings -> float64 array (None, an absent attribute: NaN); on failure name the element (``where(i)``)
    holding the bad value. With ``kind`` (time, count, byte count) a NaN, negative, infinite or too large
    value is refused, quoting it."""
    try:
        numbers = np.asarray(values, dtype=np.float64) if values else np.zeros(0)
    except ValueError:
        for i, v in enumerate(values):
            try:
                float(v)
            except ValueError:
                raise PerfkitFormatError(path, None, f"{where(i)}: {what}={v!r} is not a number") from None
        raise
    if kind is not None:
        _check_measured(path, numbers, values, what, where, kind)
    return numbers


def _check_measured(path: Path, numbers: np.ndarray, values: list[str | None], what: str, where: Any,
                    kind: str) -> None:
    """No NaN written out (an absent value is NaN, not measured), negative, infinite or too large value."""
    nan = np.flatnonzero(np.isnan(numbers))
    written = nan[np.not_equal(np.asarray(values, dtype=object)[nan], None)]
    bad = np.union1d(written, np.flatnonzero((numbers < 0) | (numbers >= TOO_LARGE)))
    if bad.size:
        i = int(bad[0])
        raise PerfkitFormatError(path, None, f"{where(i)}: {what}: expected a non-negative {kind}, "
                                             f"found {values[i].strip()!r}")


def _hent_where(parsed: _Parsed, i: int) -> str:
    ends = np.cumsum([t.nhent for t in parsed.tasks])
    task = int(np.searchsorted(ends, i, side="right"))
    nth = i - (ends[task - 1] if task else 0) + 1
    return f"{parsed.tasks[task].where}/hash/hent[{nth}]"


def _func_where(parsed: _Parsed, i: int) -> str:
    reg = parsed.fn_region[i]
    task = parsed.tasks[parsed.reg_task[reg]]
    return f"{task.where}/regions/region[@label={parsed.reg_label[reg]!r}]/func[@name={parsed.fn_name[i]!r}]"


# --------------------------------------------------------------------------- building


@dataclass
class _Columns:
    """Numeric views of the parsed columns, with rank positions resolved."""

    ranks: np.ndarray
    task_pos: np.ndarray  # position of each task's rank on the rank axis
    reg_task: np.ndarray
    reg_parent: np.ndarray
    reg_wtime: np.ndarray
    reg_mtime: np.ndarray
    fn_pos: np.ndarray  # rank position of each <func>
    fn_func: np.ndarray  # function-axis position of each <func> (0: no name)
    fn_count: np.ndarray
    fn_bytes: np.ndarray
    fn_time: np.ndarray
    he_task: np.ndarray
    he_pos: np.ndarray  # rank position of each <hent>
    he_func: np.ndarray  # function-axis position of each <hent> (0: no call name)
    he_bytes: np.ndarray
    he_count: np.ndarray
    he_time: np.ndarray  # total seconds


def read(path: str | Path, *, region: str | None = None, **run_metadata: Any) -> xr.Dataset:
    """Read an IPM XML log into the canonical Dataset.

    ``region=None`` sums the top-level regions (the whole run); ``region="bar1/foo"`` selects one
    IPM region by its path of labels (inclusive of its sub-regions), ``region="foo"`` by label
    when that names one path only (else a ValueError names the candidates). With a region,
    ``elapsed`` is the region's own wall time (slowest rank) and the run coordinate
    ``selected_region`` holds its path. ``region_time`` (run, region) [s] lists every region path of the file with
    its wall time on the slowest rank. ``run_metadata`` (label, source, system, ...) fills what
    the file does not state; the file's nprocs/nodes/ppn/threads/elapsed win.
    """
    path = Path(path)
    parsed = _parse(path)
    warnings: list[str] = []
    functions = _function_axis(parsed)
    cols = _columns(path, parsed, functions, warnings)
    selected = _select_regions(parsed, cols, region)
    profile = _profile(parsed, cols, selected, functions, warnings)
    hent_mask = _hent_mask(path, parsed, cols, selected, region, warnings)
    traffic = sizes = size_bins = None
    if hent_mask is not None:
        _bytes_from_hash(cols, hent_mask, profile)
        traffic = _traffic(path, parsed, cols, hent_mask, functions, warnings)
        sizes, size_bins = _sizes(cols, hent_mask, len(functions))
    _split_directions(profile, functions)
    compute = _compute_time(parsed, cols, selected, profile, functions, region, warnings)
    profile[:, 0, PROFILE_METRICS.index("time")] = compute
    _check_consistency(parsed, cols, warnings)
    _note_unread(parsed, warnings)
    meta = _run_metadata(parsed, cols, run_metadata, warnings)
    paths = _region_paths(parsed, cols)
    if region is not None:
        wall = np.zeros(len(cols.ranks))
        np.add.at(wall, cols.task_pos[cols.reg_task[selected]], cols.reg_wtime[selected])
        meta["elapsed"] = float(np.nanmax(wall)) if wall.size else np.nan  # the region's own, slowest rank
        meta["selected_region"] = paths[int(np.flatnonzero(selected)[0])]
    ds = make_run(
        profile, ranks=cols.ranks, functions=functions, metrics=PROFILE_METRICS, extra_units=EXTRA_UNITS,
        run=meta, traffic=traffic, sizes=sizes, size_bins=size_bins, warnings=warnings, reader=READER,
    )
    return ds.assign(_region_table(cols, paths))


def _region_paths(parsed: _Parsed, cols: _Columns) -> list[str]:
    """Each region row's path of labels from the top level, e.g. ``bar1/foo``."""
    paths: list[str] = []
    for i, label in enumerate(parsed.reg_label):
        up = cols.reg_parent[i]
        paths.append(label if up < 0 else f"{paths[up]}/{label}")  # parents come first (pre-order)
    return paths


def _region_table(cols: _Columns, paths: list[str]) -> dict[str, Any]:
    """``region_time`` (run, region) [s]: wall time of each region path on its slowest rank."""
    names = sorted(set(paths))
    if not names:
        return {}
    index = {name: k for k, name in enumerate(names)}
    wall = np.zeros((len(cols.ranks), len(names)))
    np.add.at(wall, (cols.task_pos[cols.reg_task], [index[p] for p in paths]), cols.reg_wtime)
    return {"region_time": xr.DataArray(wall.max(axis=0)[np.newaxis], dims=("run", "region"),
                                        coords={"region": names},
                                        attrs={"units": "s", "description": "IPM region wall time, slowest rank"})}


def _columns(path: Path, parsed: _Parsed, functions: list[str], warnings: list[str]) -> _Columns:
    ranks, task_pos = _rank_axis(path, parsed, warnings)
    reg_task = np.asarray(parsed.reg_task, dtype=np.int64)
    fn_region = np.asarray(parsed.fn_region, dtype=np.int64)
    he_task = np.repeat(np.arange(len(parsed.tasks)), [t.nhent for t in parsed.tasks])
    return _Columns(
        ranks=ranks,
        task_pos=task_pos,
        reg_task=reg_task,
        reg_parent=np.asarray(parsed.reg_parent, dtype=np.int64),
        reg_wtime=_numbers(path, parsed.reg_wtime, "wtime", lambda i: _region_where(parsed, i), "time"),
        reg_mtime=_numbers(path, parsed.reg_mtime, "mtime", lambda i: _region_where(parsed, i), "time"),
        fn_pos=task_pos[reg_task[fn_region]] if fn_region.size else np.zeros(0, dtype=np.int64),
        fn_func=_function_codes(parsed.fn_name, functions),
        fn_count=_numbers(path, parsed.fn_count, "count", lambda i: _func_where(parsed, i), "count"),
        fn_bytes=_numbers(path, parsed.fn_bytes, "bytes", lambda i: _func_where(parsed, i), "byte count"),
        fn_time=_numbers(path, parsed.fn_time, "seconds", lambda i: _func_where(parsed, i), "time"),
        he_task=he_task,
        he_pos=task_pos[he_task],
        he_func=_function_codes(parsed.he_call, functions),
        he_bytes=_numbers(path, parsed.he_bytes, "bytes", lambda i: _hent_where(parsed, i), "byte count"),
        he_count=_numbers(path, parsed.he_count, "count", lambda i: _hent_where(parsed, i), "count"),
        he_time=_hent_totals(path, parsed),
    )


def _hent_totals(path: Path, parsed: _Parsed) -> np.ndarray:
    """The total seconds of each hash entry (first of its ``total min max`` numbers) [s]."""
    tokens = " ".join(parsed.he_text).split()
    if len(tokens) != 3 * len(parsed.he_text):
        bad = next(i for i, text in enumerate(parsed.he_text) if len(text.split()) != 3)
        raise PerfkitFormatError(path, None, f"{_hent_where(parsed, bad)}: text {parsed.he_text[bad]!r} is not "
                                             "'total min max' seconds")
    return _numbers(path, tokens[0::3], "total time", lambda i: _hent_where(parsed, i), "time")


def _rank_axis(path: Path, parsed: _Parsed, warnings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Rank coordinate (0..ntasks-1 when the file states ntasks) and each task's position on it."""
    task_ranks = np.array([t.rank for t in parsed.tasks], dtype=np.int64)
    uniq, counts = np.unique(task_ranks, return_counts=True)
    if (counts > 1).any():
        raise PerfkitFormatError(path, None, f"mpi_rank {int(uniq[counts > 1][0])} occurs in more than one <task>")
    if uniq[0] < 0:
        raise PerfkitFormatError(path, None, f"negative mpi_rank {int(uniq[0])}")
    ntasks = _uniform([t.ntasks for t in parsed.tasks])
    if not np.isnan(ntasks) and not (1 <= ntasks < 2**31 and ntasks == np.floor(ntasks)):
        raise PerfkitFormatError(path, _line_of(path, b"ntasks="), f"the task count (job@ntasks, task@mpi_size) is "
                                                                   f"{ntasks!r}; expected an integer in 1..2**31-1")
    if not np.isnan(ntasks) and uniq[-1] < ntasks:  # the rank axis is allocated for every task stated
        refusal = too_big(ntasks * 8 * len(PROFILE_METRICS) * (len(set(parsed.fn_name)) + 1),
                          f"a profile of {int(ntasks):,} ranks")
        if refusal:
            raise PerfkitFormatError(path, _line_of(path, b"ntasks="), refusal)
    if np.isnan(ntasks) or uniq[-1] >= ntasks:
        warnings.append("the task count (job@ntasks) is absent, differs between tasks or is below the ranks "
                        "found; the rank axis holds the ranks found")
        ranks = uniq
    else:
        ranks = np.arange(int(ntasks))
        if len(uniq) < len(ranks):
            warnings.append(f"the job has {int(ntasks)} tasks but the file holds {len(uniq)}; ranks "
                            f"{_short(np.setdiff1d(ranks, uniq))} have no <task> and are NaN")
    return ranks, np.searchsorted(ranks, task_ranks)


def _region_where(parsed: _Parsed, i: int) -> str:
    return f"{parsed.tasks[parsed.reg_task[i]].where}/regions/region[@label={parsed.reg_label[i]!r}]"


def _uniform(values: list[float]) -> float:
    """The common value of ``values`` (NaN if absent anywhere or not all equal)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0 or np.isnan(arr).any() or (arr != arr[0]).any():
        return np.nan
    return float(arr[0])


def _short(values: Any, limit: int = 8) -> str:
    values = [int(v) for v in values]
    text = ", ".join(map(str, values[:limit]))
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def _select_regions(parsed: _Parsed, cols: _Columns, region: str | None) -> np.ndarray:
    """Boolean mask over region rows: top-level ones, or the outermost ones labelled ``region``."""
    if region is None:
        return cols.reg_parent < 0
    paths = _region_paths(parsed, cols)
    by_path = "/" in region
    chosen = np.array([(path if by_path else label) == region for path, label in zip(paths, parsed.reg_label)],
                      dtype=bool)
    if not chosen.any():
        raise ValueError(f"no IPM region {region!r}; the file has {sorted(set(paths))}")
    chosen &= ~_below(chosen, cols.reg_parent)
    candidates = sorted({paths[i] for i in np.flatnonzero(chosen)})
    if len(candidates) > 1:
        raise ValueError(f"IPM region {region!r} is ambiguous: it names {candidates}; pass one of these paths")
    return chosen


def _below(marked: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Rows with a ``marked`` ancestor (strictly above them)."""
    out = np.zeros_like(marked)
    for i in range(len(marked)):
        up = parent[i]
        while up >= 0 and not out[i]:
            out[i] = marked[up]
            up = parent[up]
    return out


def _function_axis(parsed: _Parsed) -> list[str]:
    names = set(parsed.fn_name) | set(parsed.he_call)
    names.discard("")
    return [COMPUTE, *sorted(names)]


def _function_codes(names: list[str], functions: list[str]) -> np.ndarray:
    """Position of each name on the function axis (0, i.e. Compute, for an empty name)."""
    index = {name: i for i, name in enumerate(functions)}
    index[""] = 0
    return np.array([index[n] for n in names], dtype=np.int64)


def _profile(parsed: _Parsed, cols: _Columns, selected: np.ndarray, functions: list[str],
             warnings: list[str]) -> np.ndarray:
    """(rank, function, metric) cube of time, calls and bytes from the selected ``<func>`` entries."""
    nrank, nfunc = len(cols.ranks), len(functions)
    m = PROFILE_METRICS.index
    out = np.full((nrank, nfunc, len(PROFILE_METRICS)), np.nan)
    present = np.zeros(nrank, dtype=bool)
    present[cols.task_pos] = True
    measured = present[:, None] & (np.arange(nfunc) > 0)[None, :]
    for metric in ("time", "calls", "bytes"):
        out[:, :, m(metric)] = np.where(measured, 0.0, np.nan)
    fi = cols.fn_func
    if (fi == 0).any():
        warnings.append(f"{int((fi == 0).sum())} <func> elements without a name were left out")
    keep = (fi > 0) & selected[np.asarray(parsed.fn_region, dtype=np.int64)] if fi.size else fi > 0
    for metric, values in (("time", cols.fn_time), ("calls", cols.fn_count), ("bytes", cols.fn_bytes)):
        np.add.at(out[:, :, m(metric)], (cols.fn_pos[keep], fi[keep]), values[keep])
    return out


def _split_directions(out: np.ndarray, functions: list[str]) -> None:
    """Copy bytes/calls of send and receive calls into the directional metrics (NaN elsewhere)."""
    m = PROFILE_METRICS.index
    for j, name in enumerate(functions):
        if name in SEND_CALLS or name in SENDRECV_CALLS:
            out[:, j, m("bytes_sent")] = out[:, j, m("bytes")]
            out[:, j, m("calls_sent")] = out[:, j, m("calls")]
        if name in RECV_CALLS:
            out[:, j, m("bytes_recv")] = out[:, j, m("bytes")]
        if name in RECV_CALLS or name in SENDRECV_CALLS:
            out[:, j, m("calls_recv")] = out[:, j, m("calls")]


def _mpi_module_mask(functions: list[str]) -> np.ndarray:
    """Functions whose time IPM counts in ``mtime`` (MPI, not MPI-IO) [assumption, see docs]."""
    return np.array([f.startswith("MPI_") and not f.startswith("MPI_File_") for f in functions], dtype=bool)


def _compute_time(parsed: _Parsed, cols: _Columns, selected: np.ndarray, profile: np.ndarray,
                  functions: list[str], region: str | None, warnings: list[str]) -> np.ndarray:
    """Per rank: wall time - MPI time - time in non-MPI functions [s] (NaN where unknown)."""
    nrank = len(cols.ranks)
    wall = np.full(nrank, np.nan)
    mpi = np.full(nrank, np.nan)
    if region is None:
        wall[cols.task_pos] = [t.wtime for t in parsed.tasks]
        mpi[cols.task_pos] = [t.mtime for t in parsed.tasks]
        lacking = [t.rank for t in parsed.tasks if np.isnan(t.wtime) or np.isnan(t.mtime)]
        if lacking:
            warnings.append(f"ranks {_short(lacking)} lack <perf wtime mtime>: their Compute time is NaN")
    else:
        pos = cols.task_pos[cols.reg_task[selected]]
        wall[cols.task_pos] = 0.0
        mpi[cols.task_pos] = 0.0
        np.add.at(wall, pos, cols.reg_wtime[selected])
        np.add.at(mpi, pos, cols.reg_mtime[selected])
        absent = np.setdiff1d(cols.task_pos, pos)
        if absent.size:
            warnings.append(f"ranks {_short(cols.ranks[absent])} never entered region {region!r}: zero time")
    other = ~_mpi_module_mask(functions)
    other[0] = False
    return wall - mpi - np.nansum(profile[:, other, PROFILE_METRICS.index("time")], axis=1)


def _hent_mask(path: Path, parsed: _Parsed, cols: _Columns, selected: np.ndarray, region: str | None,
               warnings: list[str]) -> np.ndarray | None:
    """Which hash entries belong to the selection (None: no usable ``<hash>``)."""
    if not parsed.has_hash:
        warnings.append("no <hash> section (terse IPM log): no traffic matrix and no message-size histogram")
        return None
    mask = cols.he_func > 0
    if not mask.all():
        warnings.append(f"{int((~mask).sum())} <hent> elements without a call name were left out")
    if region is None:
        return mask
    reg_id = _numbers(path, parsed.reg_id, "id", lambda i: _region_where(parsed, i)).astype(np.int64)
    he_region = _numbers(path, parsed.he_region, "region", lambda i: _hent_where(parsed, i)).astype(np.int64)
    if (reg_id[selected] < 0).any() or (he_region < 0).any():
        warnings.append(f"regions carry no id attribute, so hash entries cannot be matched to region {region!r}: "
                        "no traffic matrix and no message-size histogram for it")
        return None
    inside = selected | _below(selected, cols.reg_parent)
    span = int(max(reg_id.max(initial=0), he_region.max(initial=0))) + 1
    allowed = cols.reg_task[inside] * span + reg_id[inside]
    return mask & np.isin(cols.he_task * span + he_region, allowed)


def _bytes_from_hash(cols: _Columns, mask: np.ndarray, profile: np.ndarray) -> None:
    """``bytes`` = sum(bytes x count) of the hash entries [B]: exact, where ``<func bytes>`` has 5
    significant digits (2.0.x) or is absent (0.98x); kept from ``<func>`` where the hash has none."""
    fi = cols.he_func
    derived = np.zeros(profile.shape[:2])
    seen = np.zeros(profile.shape[:2], dtype=bool)
    np.add.at(derived, (cols.he_pos[mask], fi[mask]), (cols.he_bytes * cols.he_count)[mask])
    seen[cols.he_pos[mask], fi[mask]] = True
    m = PROFILE_METRICS.index("bytes")
    profile[:, :, m] = np.where(seen, derived, profile[:, :, m])


# --------------------------------------------------------------------------- traffic and sizes


def _partners(path: Path, parsed: _Parsed, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Partner rank of the hash entries ``rows`` and a reason code: 0 known, 1 sentinel in the
    hexadecimal key, 2 ``orank=0`` that the key cannot tell from MPI_ANY_SOURCE/MPI_PROC_NULL."""
    orank = _numbers(path, [parsed.he_orank[i] for i in rows], "orank", lambda i: _hent_where(parsed, rows[i]))
    partner = orank.astype(np.int64)
    reason = np.zeros(len(rows), dtype=np.int64)
    keys = [parsed.he_key[i] for i in rows]
    hexed = np.array([bool(_HEX_KEY.match(k)) for k in keys], dtype=bool)
    if hexed.any():
        field_rank = np.array([int(k[-8:], 16) & _RANK_MASK for k, h in zip(keys, hexed) if h], dtype=np.int64)
        sentinel = np.isin(field_rank, list(_RANK_SENTINELS))
        partner[hexed] = np.where(sentinel, -1, field_rank)
        reason[np.flatnonzero(hexed)[sentinel]] = 1
    reason[~hexed & (partner == 0)] = 2
    return partner, reason


def _traffic(path: Path, parsed: _Parsed, cols: _Columns, mask: np.ndarray, functions: list[str],
             warnings: list[str]) -> Any:
    """(sender, receiver, quantity) from point-to-point hash entries; numpy or sparse.COO."""
    send_codes = [i for i, f in enumerate(functions) if f in SEND_CALLS or f in SENDRECV_CALLS]
    sends = mask & np.isin(cols.he_func, send_codes)
    recvs = mask & np.isin(cols.he_func, [i for i, f in enumerate(functions) if f in RECV_CALLS])
    rows = np.flatnonzero(sends | recvs)
    partner, reason = _partners(path, parsed, rows)
    me = cols.ranks[cols.he_pos[rows]]
    is_send = sends[rows]
    reason = _corroborate_rank0(me, partner, is_send, reason)
    valid = (reason == 0) & np.isin(partner, cols.ranks)
    _warn_left_out(cols, rows, reason, valid, functions, warnings)
    pos_partner = np.searchsorted(cols.ranks, partner)
    sender = np.where(is_send, cols.he_pos[rows], pos_partner)[valid]
    receiver = np.where(is_send, pos_partner, cols.he_pos[rows])[valid]
    r = rows[valid]
    values = np.column_stack([cols.he_bytes[r] * cols.he_count[r], cols.he_count[r], cols.he_time[r]])
    nrank = len(cols.ranks)
    return _merge_sides(sender * nrank + receiver, is_send[valid], values, nrank, warnings)


def _corroborate_rank0(me: np.ndarray, partner: np.ndarray, is_send: np.ndarray, reason: np.ndarray) -> np.ndarray:
    """Keep an ambiguous ``orank=0`` entry only if rank 0 itself logged the opposite direction
    with this rank as its (unambiguous) partner: the message then really involved rank 0."""
    ambiguous = (reason == 2) & (me != 0)
    if not ambiguous.any():
        return reason
    by_zero = (me == 0) & (reason == 0)
    zero_sent_to = set(partner[by_zero & is_send].tolist())
    zero_received_from = set(partner[by_zero & ~is_send].tolist())
    out = reason.copy()
    for i in np.flatnonzero(ambiguous):
        if int(me[i]) in (zero_received_from if is_send[i] else zero_sent_to):
            out[i] = 0
    return out


def _warn_left_out(cols: _Columns, rows: np.ndarray, reason: np.ndarray, valid: np.ndarray,
                   functions: list[str], warnings: list[str]) -> None:
    """Say what was left out of the traffic matrix, and how much."""
    labels = {1: "a partner coded as MPI_ANY_SOURCE/MPI_PROC_NULL/all ranks in the hash key",
              2: "orank=0 that the file cannot tell from MPI_ANY_SOURCE/MPI_PROC_NULL (rank 0 did not log "
                 "the other side)",
              0: "a partner rank outside the job"}
    for code, text in labels.items():
        r = rows[~valid & (reason == code)]
        if r.size:
            nbytes = float((cols.he_bytes[r] * cols.he_count[r]).sum())
            names = ", ".join(sorted({functions[i] for i in cols.he_func[r]}))
            warnings.append(f"traffic: left out {len(r)} point-to-point hash entries ({names}; "
                            f"{cols.he_count[r].sum():.0f} calls, {nbytes:.6g} B) with {text}")


def _merge_sides(pair: np.ndarray, is_send: np.ndarray, values: np.ndarray, nrank: int,
                 warnings: list[str]) -> Any:
    """Bytes and count from the send side where it saw the pair, else from the receive side;
    time is the sum of both sides' call time [s].

    Dense (numpy) or sparse (``sparse.COO``) by the number of non-zeros, not the rank count
    (``perfkit.model.dense_traffic``): dense when the dense array is at most 4 MiB or when at least
    a quarter of its elements are non-zero (then it is no larger than the COO).
    """
    keys, inverse = np.unique(pair, return_inverse=True)
    sums = np.zeros((2, len(keys), 3))
    np.add.at(sums, (is_send.astype(np.int64), inverse), values)
    recv_side, send_side = sums
    use_send = send_side[:, 1] > 0
    merged = np.where(use_send[:, None], send_side, recv_side)
    merged[:, 2] = send_side[:, 2] + recv_side[:, 2]
    both = use_send & (recv_side[:, 1] > 0)
    differ = both & ~np.isclose(send_side[:, 0], recv_side[:, 0], rtol=1e-3)
    if differ.any():
        warnings.append(f"traffic: for {int(differ.sum())} of {int(both.sum())} sender->receiver pairs the receive "
                        "side logged other bytes than the send side; the send side is used")
    sender, receiver = np.divmod(keys, nrank)
    quantities = len(TRAFFIC_QUANTITIES)
    if not dense_traffic(nrank, merged.size):
        coords = np.stack([np.repeat(sender, quantities), np.repeat(receiver, quantities),
                           np.tile(np.arange(quantities), len(keys))])
        return sorted_coo(coords, merged.ravel(), (nrank, nrank, quantities))
    dense = np.zeros((nrank, nrank, quantities))
    dense[sender, receiver] = merged
    return dense


def _sizes(cols: _Columns, mask: np.ndarray, nfunc: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank, function, size_bin, stat) histogram: calls and seconds per message size [B]."""
    fi = cols.he_func[mask]
    bins, bin_of = np.unique(cols.he_bytes[mask], return_inverse=True)
    out = np.zeros((len(cols.ranks), nfunc, len(bins), 2))
    ri = cols.he_pos[mask]
    np.add.at(out, (ri, fi, bin_of, 0), cols.he_count[mask])
    np.add.at(out, (ri, fi, bin_of, 1), cols.he_time[mask])
    absent = np.ones(len(cols.ranks), dtype=bool)
    absent[cols.task_pos] = False
    out[absent] = np.nan
    out[:, 0] = np.nan
    return out, bins


# --------------------------------------------------------------------------- checks and metadata


def _check_consistency(parsed: _Parsed, cols: _Columns, warnings: list[str]) -> None:
    """Warn where the file contradicts itself (MPI time vs its functions, hash vs its nlog)."""
    top = cols.reg_parent < 0
    fn_region = np.asarray(parsed.fn_region, dtype=np.int64)
    if fn_region.size:
        mpi = _mpi_module_mask(list(parsed.fn_name))
        keep = top[fn_region] & mpi
        task_of = cols.reg_task[fn_region]
        total = np.bincount(task_of[keep], cols.fn_time[keep], minlength=len(parsed.tasks))
        slack = np.bincount(task_of[keep], 5e-5 * np.abs(cols.fn_time[keep]), minlength=len(parsed.tasks))
        mtime = np.array([t.mtime for t in parsed.tasks])
        off = np.abs(total - mtime) > slack + 5e-6 * np.abs(mtime) + 1e-12
        if off.any():
            ranks = [parsed.tasks[i].rank for i in np.flatnonzero(off)]
            warnings.append(f"ranks {_short(ranks)}: the MPI functions' times do not add up to perf@mtime "
                            "beyond print precision")
    if parsed.has_hash:
        logged = np.bincount(cols.he_task, cols.he_count, minlength=len(parsed.tasks))
        nlog = np.array([t.nlog for t in parsed.tasks])
        off = ~np.isnan(nlog) & (logged != nlog)
        if off.any():
            ranks = [parsed.tasks[i].rank for i in np.flatnonzero(off)]
            warnings.append(f"ranks {_short(ranks)}: the hash entries count other calls than <hash nlog>; "
                            "entries may be missing (IPM hash table full?)")


def _note_unread(parsed: _Parsed, warnings: list[str]) -> None:
    if parsed.unknown_tags:
        warnings.append(f"unknown elements not read: {sorted(parsed.unknown_tags)}")
    if parsed.counters:
        warnings.append(f"hardware counters not read: {sorted(parsed.counters)}")
    if parsed.stray:
        warnings.append(f"{parsed.stray} <func>/<hent> elements outside a <region>/<task> were left out")


def _run_metadata(parsed: _Parsed, cols: _Columns, given: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """File values (nprocs, nodes, ppn, threads, elapsed, format) win; ``given`` fills the rest."""
    hosts, per_host = np.unique([t.host for t in parsed.tasks], return_counts=True)
    nodes = float(len(hosts)) if all(t.host for t in parsed.tasks) else np.nan
    nhosts = _uniform([t.nhosts for t in parsed.tasks])
    if not np.isnan(nhosts) and not np.isnan(nodes) and nhosts != nodes:
        warnings.append(f"job@nhosts={nhosts:.0f} but the tasks name {nodes:.0f} distinct hosts; using the hosts")
    complete = len(parsed.tasks) == len(cols.ranks)
    ppn = float(per_host[0]) if complete and not np.isnan(nodes) and (per_host == per_host[0]).all() else np.nan
    stated = {
        "nprocs": float(len(cols.ranks)),
        "nodes": nodes,
        "ppn": ppn,
        "threads": _uniform([t.threads for t in parsed.tasks]),
        "elapsed": float(np.nanmax([t.wtime for t in parsed.tasks])) if any(
            not np.isnan(t.wtime) for t in parsed.tasks) else np.nan,
        "format": "ipm",
    }
    meta = dict(given)
    for name, value in stated.items():
        if isinstance(value, float) and np.isnan(value):
            continue
        user = meta.get(name)
        if user is not None and user != "" and _differs(user, value):
            warnings.append(f"run metadata {name}={user!r} was given but the file states {value!r}; "
                            "the file's value is used")
        meta[name] = value
    return meta


def _differs(user: Any, value: Any) -> bool:
    try:
        return not np.isclose(float(user), float(value))
    except (TypeError, ValueError):
        return str(user) != str(value)
