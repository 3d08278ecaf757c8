"""The explorer's call-site view: where in the code MPI time goes, for runs read from mpiP reports or CUBE profiles.

A run's file is its ``source`` coordinate (what the readers record); its call sites are read from it when the tab
is first shown: mpiP's call sites (:func:`perfkit.io.mpip.callsites`: file, line, calling function) or CUBE's call
paths ending in an MPI function (:func:`perfkit.io.cube.read_call_tree`). Per site: time summed over the ranks in
view [s], its share of their MPI time, calls, bytes sent, and the time per rank (max, mean, min over the ranks in
view; a rank that never calls the site counts 0) with the imbalance max / mean. Verbose mpiP reports and CUBE
profiles have per-rank values, so the explorer's rank range and selection restrict the statistics; a concise mpiP
report states each site's totals and per-task extremes only, shown for every rank whatever the selection.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import panel as pn
import xarray as xr

from perfkit import text as fmt
from perfkit.errors import PerfkitFormatError
from perfkit.model import COMPUTE
from perfkit.plots.callsites import TOP, callsite_bars
from perfkit.plots.palette import labelled_colours
from perfkit.widgets.kept import Kept, Once, pending
from perfkit.widgets.selection import describe_ranks

#: Formats whose files name call sites, and the words for them.
FORMATS = {"mpip": "mpiP report", "cube": "CUBE profile"}
#: Per-rank metrics of a site: ours -> the column of mpiP's call-site table.
MPIP_COLUMNS = {"time": "time", "calls": "count", "bytes": "bytes_sent"}


@dataclass
class CallSites:
    """The call sites of one run: ``sites`` (one row per site: ``site`` in words, ``function``, ``where`` (file and
    line, or the call path), ``parent`` (the calling function or region), ``stack``), and per site either its values
    per rank (``values[metric]``, shape (site, rank) over ``ranks``; metrics ``time`` [s], ``calls``, ``bytes`` [B])
    or, where the format states no per-rank values (``values`` empty), the columns ``time``, ``bytes``,
    ``time_max``, ``time_min`` and ``tasks`` of ``sites`` over every rank."""

    sites: pd.DataFrame
    ranks: np.ndarray
    values: dict[str, np.ndarray] = field(default_factory=dict)
    source: str = ""
    format: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def per_rank(self) -> bool:
        """Whether the format gives each rank's values (the rank selection applies)."""
        return bool(self.values)


def callsite_source(ds: xr.Dataset, run: str) -> tuple[Path, str] | None:
    """The file ``run`` of ``ds`` was read from and its format, when it is an mpiP report or a CUBE profile that
    is still there; else None."""
    if "source" not in ds.coords or "format" not in ds.coords:
        return None
    i = int(np.flatnonzero(ds["run"].values.astype(str) == run)[0])
    source, form = str(ds["source"].values[i]), str(ds["format"].values[i])
    return (Path(source), form) if form in FORMATS and source and Path(source).is_file() else None


def has_callsites(ds: xr.Dataset) -> bool:
    """Whether a run of ``ds`` comes from a file with call sites (:func:`callsite_source`)."""
    if "source" not in ds.coords or "format" not in ds.coords:
        return False
    sources, forms = ds["source"].values.astype(str), ds["format"].values.astype(str)
    return any(Path(source).is_file() for source in sources[np.isin(forms, list(FORMATS)) & (sources != "")])


def read_callsites(path: str | Path, form: str, ranks: Any) -> CallSites:
    """The call sites in ``path`` (format ``form``: ``mpip`` or ``cube``) over ``ranks``, the run's ranks."""
    ranks = np.asarray(ranks, dtype=np.int64)
    if form == "mpip":
        return _mpip_sites(Path(path), ranks)
    if form == "cube":
        return _cube_sites(Path(path), ranks)
    raise ValueError(f"no call sites in a {form!r} file: call sites come from {', '.join(FORMATS)}")


def _mpip_sites(path: Path, ranks: np.ndarray) -> CallSites:
    from perfkit.io import mpip
    from perfkit.io.compressed import compression, decompressed

    with open(path, "rb") as fh:
        head = fh.read(16)
    if compression(head):
        with decompressed(path, head) as plain:
            table = mpip.callsites(plain)
    else:
        table = mpip.callsites(path)
    # one row per site: its ``*`` row where printed (a site with rank rows only is kept too)
    star = table.sort_values("aggregate", ascending=False, kind="stable").drop_duplicates(["function", "site"])
    star = star.sort_values(["function", "site"]).reset_index(drop=True)
    sites = _mpip_labels(star)
    rows = table[~table["aggregate"]]
    if rows.empty:  # concise: totals over the tasks that call the site, and their extremes
        tasks = star["tasks"].to_numpy(dtype=float)
        sites = sites.assign(time=star["time_total"].to_numpy(dtype=float),
                             bytes=star.get("bytes_sent_total", pd.Series(np.nan, index=star.index)).to_numpy(float),
                             time_max=star["time_task_max"].to_numpy(dtype=float),
                             time_min=np.where(tasks < ranks.size, 0.0, star["time_task_min"].to_numpy(dtype=float)),
                             tasks=tasks)
        note = ("A concise mpiP report states each site's total and its largest and smallest task: the numbers are "
                "over every rank, whatever the rank selection; it counts no calls.")
        return CallSites(sites, ranks, source=str(path), format="mpip", notes=[note])
    index = pd.MultiIndex.from_frame(star[["function", "site"]])
    where = index.get_indexer(pd.MultiIndex.from_frame(rows[["function", "site"]]))
    rank = rows["rank"].to_numpy(dtype=np.int64)
    column = np.minimum(np.searchsorted(ranks, rank), max(ranks.size - 1, 0))
    known = (ranks[column] == rank) if ranks.size else np.zeros(rank.size, bool)
    values = {}
    for ours, theirs in MPIP_COLUMNS.items():
        grid = np.zeros((len(star), ranks.size))
        if theirs in rows:  # a site missing from one section (time, bytes) has nothing there
            np.add.at(grid, (where[known], column[known]), np.nan_to_num(rows[theirs].to_numpy(dtype=float))[known])
        values[ours] = grid
    notes = []
    printed = np.where(star["aggregate"].to_numpy(bool), star["count"].to_numpy(dtype=float), np.nan)
    hidden = printed > values["calls"].sum(axis=1) + 0.5
    if hidden.any():
        notes.append(f"{fmt.plural(int(hidden.sum()), 'site')} of this report lost rank rows to mpiP's print "
                     "threshold: their per-rank numbers are only those printed.")
    return CallSites(sites, ranks, values, source=str(path), format="mpip", notes=notes)


def _mpip_labels(star: pd.DataFrame) -> pd.DataFrame:
    """Site words ``MPI_Send @ file.c:123 (in parent)``, functions without their argument lists, with the callers
    above the parent (``in parent < caller``) where that tells equal sites apart; where and stack."""
    file = star["file"].astype(object).where(star["file"].notna(), "")
    line = star["line"].astype("Int64")
    base = file.map(lambda f: Path(str(f)).name if f else "")
    at = [f"{b}:{n}" if b and pd.notna(n) else b for b, n in zip(base, line, strict=True)]
    heads = [f"{f} @ {a}" if a else f"{f} site {s}" for f, a, s in zip(star["function"], at, star["site"], strict=True)]
    stack = star["stack"].astype(object).where(star["stack"].notna(), "").astype(str)
    frames = [[frame.rsplit(" (", 1) for frame in text.split(" < ")] if text else [] for text in stack]
    callers = [[_short(f[0]) for f in chain] for chain in frames]
    # a caller's line tells apart the sites that only it does: level 0's is the call's own (in ``at``)
    lined = [[_short(f[0]) + (_line_of(f[1]) if k and len(f) > 1 else "") for k, f in enumerate(chain)]
             for chain in frames]
    words = _labels(heads, callers, [f"site {s}" for s in star["site"]], lined)
    where = [f"{f}:{n}" if f and pd.notna(n) else str(f) for f, n in zip(file, line, strict=True)]
    return pd.DataFrame({"site": words, "function": star["function"].astype(str).to_numpy(), "where": where,
                         "parent": star["parent"].astype(object).where(star["parent"].notna(), "").astype(str),
                         "stack": stack.to_numpy(), "site_id": star["site"].to_numpy()})


#: gfortran's name of a module procedure: ``__<module>_MOD_<procedure>``.
FORTRAN_MODULE = re.compile(r"^__\w+?_MOD_(?=\w)")


def _short(function: str) -> str:
    """A function's name without its argument list or gfortran's module prefix: ``solve(Matrix*, double)`` ->
    ``solve``, ``__clover_module_MOD_clover_exchange`` -> ``clover_exchange``."""
    name = function.split("(")[0].strip() or function.strip()
    return FORTRAN_MODULE.sub("", name)


def _line_of(location: str) -> str:
    """``:123`` of a stack frame's ``file.c:123)``, empty without a line."""
    line = location.rstrip(")").rpartition(":")[2]
    return f":{line}" if line.isdigit() else ""


def _cube_sites(path: Path, ranks: np.ndarray) -> CallSites:
    from perfkit.io.cube import PATH_SEPARATOR, read_call_tree

    tree = read_call_tree(path)
    mpi = (tree.paths["function"] != COMPUTE).to_numpy()
    paths = tree.paths[mpi].reset_index(drop=True)
    column = {int(r): i for i, r in enumerate(tree.ranks)}
    take = np.array([column.get(int(r), -1) for r in ranks], dtype=np.int64)

    def per_rank(metric: str) -> np.ndarray:
        grid = np.zeros((len(paths), ranks.size))
        if metric in tree.values:
            grid[:, take >= 0] = tree.values[metric][mpi][:, take[take >= 0]]
        return grid

    values = {"time": per_rank("time"), "calls": per_rank("calls"), "bytes": per_rank("bytes_sent")}
    callers = paths["path"].str.split(PATH_SEPARATOR).map(lambda names: names[:-1][::-1])
    words = _labels(paths["function"].tolist(), callers.tolist(), [f"call path {c}" for c in paths["cnode"]])
    sites = pd.DataFrame({"site": words, "function": paths["function"].to_numpy(), "where": paths["path"].to_numpy(),
                          "parent": paths["parent"].to_numpy(), "stack": paths["path"].to_numpy(),
                          "site_id": paths["cnode"].to_numpy()})
    return CallSites(sites, ranks, values, source=str(path), format="cube")


def _labels(heads: list[str], callers: list[list[str]], tags: list[str],
            lined: list[list[str]] | None = None) -> list[str]:
    """``head (in caller < its caller ...)`` with the nearest caller, and as many more as tell equal ones apart;
    those still equal with the callers of ``lined`` (the same, with their lines) instead, then ``[tag]`` after
    any still equal."""
    words = _nearest_callers(heads, callers)
    if lined is not None:
        counts = pd.Series(words, dtype=object).value_counts()
        words = [w if counts[w] == 1 else alt for w, alt in zip(words, _nearest_callers(heads, lined), strict=True)]
    return _unique(words, tags)


def _nearest_callers(heads: list[str], callers: list[list[str]]) -> list[str]:
    """``head (in caller < ...)``: for each, as few callers as tell it apart from the others (all when none do)."""
    depth = [1] * len(heads)
    while True:
        words = [f"{h} (in {' < '.join(c[:d])})" if c else h for h, c, d in zip(heads, callers, depth, strict=True)]
        counts = pd.Series(words, dtype=object).value_counts()
        clash = [i for i, w in enumerate(words) if counts[w] > 1 and depth[i] < len(callers[i])]
        if not clash:
            return words
        for i in clash:
            depth[i] += 1


def _unique(words: list[str], tags: list[str]) -> list[str]:
    """``words`` with ``[tag]`` appended to those that appear more than once."""
    counts = pd.Series(words).value_counts()
    return [f"{w} [{t}]" if counts[w] > 1 else w for w, t in zip(words, tags, strict=True)]


def site_table(sites: CallSites, ranks: Any = None) -> pd.DataFrame:
    """One row per site, most time first: ``site``, ``function``, ``time`` [s] summed over ``ranks`` (default
    every rank of the run; ignored without per-rank values), ``share`` of their MPI time (0-1), ``calls``, ``bytes``
    [B], the time per rank ``max`` / ``mean`` / ``min`` [s] over those ranks (0 for a rank without the site),
    ``imbalance`` (max / mean), ``rank_of_max``, and ``where``, ``parent``, ``stack``."""
    out = sites.sites[["site", "function"]].copy()
    if sites.per_rank:
        chosen = np.ones(sites.ranks.size, bool) if ranks is None else np.isin(sites.ranks, np.asarray(ranks))
        time = sites.values["time"][:, chosen]
        count = int(chosen.sum())
        out["time"] = time.sum(axis=1)
        out["calls"] = sites.values["calls"][:, chosen].sum(axis=1)
        out["bytes"] = sites.values["bytes"][:, chosen].sum(axis=1)
        out["max"] = time.max(axis=1) if count else np.nan
        out["mean"] = time.mean(axis=1) if count else np.nan
        out["min"] = time.min(axis=1) if count else np.nan
        out["rank_of_max"] = pd.array(sites.ranks[chosen][time.argmax(axis=1)] if count else [pd.NA] * len(out),
                                      dtype="Int64")
    else:
        table = sites.sites
        out["time"], out["bytes"] = table["time"].to_numpy(), table["bytes"].to_numpy()
        out["calls"] = np.nan
        out["max"], out["min"] = table["time_max"].to_numpy(), table["time_min"].to_numpy()
        out["mean"] = out["time"] / max(sites.ranks.size, 1)
        out["rank_of_max"] = pd.array([pd.NA] * len(out), dtype="Int64")
    total = float(np.nansum(out["time"]))
    out["share"] = out["time"] / total if total > 0 else np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        out["imbalance"] = np.where(out["mean"] > 0, out["max"] / out["mean"], np.nan)
    for name in ("where", "parent", "stack"):
        out[name] = sites.sites[name].to_numpy()
    order = ["site", "function", "time", "share", "calls", "bytes", "max", "mean", "min", "imbalance",
             "rank_of_max", "where", "parent", "stack"]
    return out[order].sort_values(["time", "site"], ascending=[False, True], kind="stable").reset_index(drop=True)


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`site_table` for a sortable table: numbers kept as numbers in a unit that fits (time in µs, ms, s or
    min, one for the time and one for the per-rank columns; bytes with an SI prefix; named in the column titles),
    three significant digits."""
    time_unit, time_scale = _time_unit(np.nanmax(table["time"].to_numpy(dtype=float), initial=0.0))
    rank_unit, rank_scale = _time_unit(np.nanmax(table["max"].to_numpy(dtype=float), initial=0.0))
    byte_unit, byte_scale = _byte_unit(np.nanmax(table["bytes"].to_numpy(dtype=float), initial=0.0))
    shown = pd.DataFrame({"site": table["site"], "MPI function": table["function"]})
    shown[f"time [{time_unit}]"] = _digits(table["time"] / time_scale)
    shown["share of MPI time [%]"] = _digits(100 * table["share"])
    shown["calls"] = table["calls"].astype("Float64").round().astype("Int64")
    shown[f"bytes sent [{byte_unit}]"] = _digits(table["bytes"] / byte_scale)
    for name in ("max", "mean", "min"):
        shown[f"{name} per rank [{rank_unit}]"] = _digits(table[name] / rank_scale)
    shown["max / mean"] = table["imbalance"].round(2)
    shown["rank of max"] = table["rank_of_max"]
    shown["where"], shown["called from"] = table["where"], table["parent"]
    return shown


def _digits(values: pd.Series, digits: int = 3) -> pd.Series:
    """``values`` rounded to ``digits`` significant digits (NaN kept)."""
    array = values.to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        places = np.where(array != 0, digits - 1 - np.floor(np.log10(np.abs(array))), 0)
    scale = 10.0 ** np.nan_to_num(places)
    return pd.Series(np.round(array * scale) / scale, index=values.index)


def _time_unit(largest: float) -> tuple[str, float]:
    """The unit (and its size [s]) in which ``largest`` [s] reads best."""
    for unit, scale in (("min", 60.0), ("s", 1.0), ("ms", 1e-3)):
        if largest >= (120.0 if unit == "min" else scale):
            return unit, scale
    return "µs", 1e-6


def _byte_unit(largest: float) -> tuple[str, float]:
    """The SI prefix of bytes (and its size [B]) in which ``largest`` [B] reads best."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if largest >= scale:
            return unit, scale
    return "B", 1.0


def callsite_view(sites: CallSites, run: str, ranks: np.ndarray | None = None, top: int = TOP,
                  functions: Any = None) -> pn.Column:
    """The view of ``sites`` (of ``run``) over ``ranks`` (None: every rank of the run): a note, bars of the ``top``
    sites by time coloured by MPI function (:func:`perfkit.plots.callsites.callsite_bars`; ``functions``, the names
    the per-rank view colours, keep its colours) and the sortable table of every site (:func:`site_table`)."""
    if sites.per_rank and ranks is not None and np.isin(sites.ranks, ranks).sum() == 0:
        return pn.Column(pn.pane.Markdown(f"Call sites of {run}: no rank in view (range and selection)."))
    table = site_table(sites, ranks if sites.per_rank else None)
    if table.empty or not np.nansum(table["time"]) > 0:
        return pn.Column(pn.pane.Markdown(f"No MPI time at a call site of {run} in {Path(sites.source).name}."))
    kind = "call sites" if sites.format == "mpip" else "call paths ending in an MPI call"
    over = "every rank" if ranks is None or not sites.per_rank else \
        f"the {fmt.plural(int(np.isin(sites.ranks, ranks).sum()), 'rank')} in view ({describe_ranks(ranks)})"
    lead = (f"**Where MPI time goes in {run}**: {fmt.plural(len(table), 'site')} ({kind}) of the "
            f"{FORMATS[sites.format]} `{Path(sites.source).name}`, over {over}; {fmt.seconds(table['time'].sum())} "
            f"of MPI time. The {min(top, len(table))} with most time are drawn; the table lists every one (click "
            "a column title to sort). Per rank: a rank that never calls the site counts 0; max / mean is its "
            "imbalance.")
    shown = shown_table(table)
    widget = pn.widgets.Tabulator(shown, show_index=False, disabled=True, sizing_mode="stretch_width", height=360,
                                  layout="fit_data_fill", pagination=None,
                                  header_align={c: "left" for c in shown.columns}, frozen_columns=["site"])
    parts: list[Any] = [pn.pane.Markdown(fmt.sentences(lead, *sites.notes), sizing_mode="stretch_width"),
                        pn.pane.HoloViews(callsite_bars(
                            table, title=f"{run}: MPI time by call site", top=top,
                            cmap=labelled_colours([*functions, *table["function"]]) if functions is not None else None),
                                          sizing_mode="stretch_width", backend="bokeh"), widget]
    return pn.Column(*parts, sizing_mode="stretch_width")


def run_ranks(ds: xr.Dataset, run: str) -> np.ndarray:
    """The ranks of ``run``: those with a value; for a run with none (a concise mpiP report), ranks 0 to
    ``nprocs`` - 1 when it is known, else every rank of ``ds``."""
    exists = ds["profile"].sel(run=run).notnull().any(("function", "metric")).transpose("rank").values
    ranks = np.asarray(ds["rank"].values, dtype=np.int64)
    if exists.any():
        return ranks[exists]
    nprocs = float(ds["nprocs"].sel(run=run)) if "nprocs" in ds.coords else np.nan
    return ranks[ranks < nprocs] if np.isfinite(nprocs) else ranks


def callsite_tab(ds: xr.Dataset, in_view: Any) -> tuple[Callable[..., Any], Callable[..., Once[Any] | None]]:
    """The explorer tab's view of a run's call sites and what it needs first, ``(view, needs)``:
    ``view(run, rank_range, selected)`` draws them on the ranks ``in_view(run, rank_range, selected)`` gives (None:
    every rank); ``needs(run, ...)`` is the run's read while not yet done (its file and its ranks), for the explorer
    to do off its event loop (:class:`perfkit.widgets.offloop.OffLoop`). Each run is read once, when first shown;
    a file that could not be read says why."""
    reads: Kept[CallSites | str] = Kept(ds.sizes["run"])  # every run's, once read
    functions = [str(f) for f in ds["function"].values]

    def read(run: str) -> Once[CallSites | str]:
        return reads.cell(run, lambda: _read_run(ds, run))

    def view(run: str, rank_range: tuple[int, int], selected: list[int] | None) -> Any:
        if callsite_source(ds, run) is None:
            return pn.pane.Markdown(f"{run} was not read from an mpiP report or a CUBE profile that is still on disk: "
                                    "no call sites to show.")
        sites = read(run)()
        if isinstance(sites, str):
            return pn.pane.Alert(sites, alert_type="warning")
        return callsite_view(sites, run, in_view(run, rank_range, selected), functions=functions)

    def needs(run: str, *_: Any) -> Once[Any] | None:
        return None if callsite_source(ds, run) is None else pending(read(run))

    return view, needs


def _read_run(ds: xr.Dataset, run: str) -> CallSites | str:
    """The call sites of ``run`` read from its file, or a sentence saying why they could not be."""
    found = callsite_source(ds, run)
    if found is None:
        return f"The file {run} was read from is no longer on disk."
    try:
        return read_callsites(*found, run_ranks(ds, run))
    except (PerfkitFormatError, OSError) as exc:
        return f"The call sites of {run} could not be read: {exc}"
