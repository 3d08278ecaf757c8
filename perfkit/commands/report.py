"""``perfkit report FILES... -o report.html``: one self-contained HTML page of what the analyses find.

The page holds the runs read, the POP efficiencies (coloured as POP does), the scaling plots when the
runs span several process counts, the findings of ``diagnose`` (severity, lead sentence, details behind
a click, the caveats they share said once), and per run the stacked time per rank and the traffic
heatmap when the profile has matrices. Bokeh's JavaScript and CSS are inlined (``bokeh.resources.INLINE``):
the page opens from disk on a machine without internet. It is written atomically (a temporary file in
the same directory, renamed) and an existing file is kept unless ``--force``.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfkit import text as fmt

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

#: Runs beyond this many get no per-run plots (the page stays light); the page says so.
MAX_RUN_PLOTS = 12
Runner = Any

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1200px;
       padding: 1.5em 2em 3em; color: #1d1d1f; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
h3 { margin-top: 1.4em; } .meta { color: #555; font-size: 0.92em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.93em; }
th, td { padding: 0.25em 0.7em; border-bottom: 1px solid #e4e4e4; vertical-align: top; }
th { text-align: left; background: #f5f5f7; } td.num { text-align: right; font-variant-numeric: tabular-nums;
       white-space: nowrap; }
.severity { display: inline-block; padding: 0.05em 0.5em; border-radius: 0.3em; font-size: 0.85em; }
.findings td.lead { max-width: 640px; } details summary { cursor: pointer; color: #0b57d0; font-size: 0.9em; }
details p { margin: 0.3em 0 0.5em; color: #333; } .note { color: #555; font-size: 0.9em; }
.plot { margin: 0.8em 0 1.2em; } .wide { overflow-x: auto; } .caveats li { margin-bottom: 0.3em; }
"""


def configure_report(parser: argparse.ArgumentParser) -> Runner:
    from perfkit.cli import _errors_option

    parser.add_argument("paths", nargs="+", metavar="FILES",
                        help="profiles, glob patterns, or stores written by 'perfkit convert' (*.zarr, *.nc)")
    parser.add_argument("-o", "--output", required=True, metavar="HTML", help="the page to write, e.g. report.html")
    parser.add_argument("--force", action="store_true", help="overwrite OUTPUT when it exists")
    parser.add_argument("--run", action="append", dest="runs", metavar="LABEL",
                        help="report only this run (repeat for several; default: every run)")
    parser.add_argument("--input-format", default=None, metavar="FORMAT",
                        help="read the profiles as this format instead of sniffing it")
    _errors_option(parser)
    parser.epilog = "exit status: 0 written, 1 a file could not be read, OUTPUT exists (without --force) " \
                    "or the analysis failed, 2 usage error"
    return run_report


def run_report(args: argparse.Namespace) -> int:
    from perfkit.cli import _check_outputs
    from perfkit.commands.analyses import load_runs
    from perfkit.io.open import expand_paths

    out = Path(args.output)
    inputs = [path for pattern in args.paths for path in expand_paths(pattern)]
    _check_outputs([(out, False)], args.force, inputs)  # refused before any work
    ds = load_runs(args.paths, args.input_format, args.errors, args.runs)
    page = build_report(ds, [str(p) for p in args.paths])
    write_atomically(out, page)
    print(f"perfkit report: wrote {out} ({fmt.nbytes(len(page.encode()))}, {fmt.plural(ds.sizes['run'], 'run')})",
          file=sys.stderr)
    return 0


def write_atomically(path: Path, content: str) -> None:
    """``content`` as UTF-8 to ``path`` through a temporary file beside it (``perfkit.atomic``), flushed to
    disk and renamed over it."""
    from perfkit import atomic

    with atomic.writing(path) as temp:
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)


def build_report(ds: xr.Dataset, sources: Sequence[str] = ()) -> str:
    """The report of ``ds`` as one HTML page with its scripts and styles inline."""
    import holoviews as hv
    from bokeh.core.validation.warnings import FIXED_SIZING_MODE
    from bokeh.embed import components

    from perfkit.analysis.diagnosis import diagnose
    from perfkit.analysis.pop import pop_metrics

    hv.extension("bokeh", logo=False)
    ds = _by_process_count(ds.load() if not _lazy(ds) else ds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        findings = diagnose(ds)
        pop = pop_metrics(ds)
    runs = [str(r) for r in ds["run"].values]
    plots: dict[str, Any] = {}
    sections = [_header(ds, sources), _runs_section(ds, pop), _pop_section(pop), _scaling_section(ds, pop, plots),
                _findings_section(findings), _per_run_section(ds, runs, findings, plots)]
    with _silenced(FIXED_SIZING_MODE):  # heatmaps are sized by their data area (frame_width), which it overlooks
        script, divs = components({key: hv.render(obj, backend="bokeh") for key, obj in plots.items()}) if plots \
            else ("", {})
    body = "\n".join(sections)
    for key, div in divs.items():
        body = body.replace(f"<!--plot:{key}-->", f'<div class="plot">{div}</div>')
    title = f"perfkit report: {fmt.plural(len(runs), 'run')}"
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{html.escape(title)}"
            f"</title>\n{_inline_resources()}\n<style>{STYLE}</style>\n{script}\n</head>\n<body>\n{body}\n</body>\n</html>\n")


@contextmanager
def _silenced(warning: Any) -> Iterator[None]:
    """Bokeh's validation ``warning`` left out inside the block (as it was before, after it)."""
    from bokeh.core.validation import check, silence

    before = warning in check.__silencers__
    silence(warning, True)
    try:
        yield
    finally:
        silence(warning, before)


def _inline_resources() -> str:
    """Bokeh's (and its extensions') JavaScript and CSS as inline ``<script>`` and ``<style>`` elements.

    Files an extension names by relative URL instead of shipping inline (panel's ES module shim, for
    components the report does not use) are left out: from disk they would be fetched and not found.
    """
    from bokeh.resources import INLINE

    return "\n".join([*(f"<script>\n{code}\n</script>" for code in INLINE.js_raw),
                      *(f"<style>\n{code}\n</style>" for code in INLINE.css_raw)])


def _by_process_count(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its runs in order of process count (runs without one last, in their order)."""
    import numpy as np

    if "nprocs" not in ds.coords:
        return ds
    nprocs = ds["nprocs"].values.astype(float)
    return ds.isel(run=np.argsort(np.where(np.isnan(nprocs), np.inf, nprocs), kind="stable"))


def _lazy(ds: xr.Dataset) -> bool:
    return any(getattr(v.data, "chunks", None) is not None for v in ds.data_vars.values())


def _header(ds: xr.Dataset, sources: Sequence[str]) -> str:
    from perfkit import __version__

    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    read = _sources(sources)
    return (f"<h1>perfkit report</h1>\n<p class=\"meta\">{fmt.plural(ds.sizes['run'], 'run')} from {read}; "
            f"perfkit {__version__}, {when}.</p>")


def _sources(sources: Sequence[str]) -> str:
    """What was read, in a few words: the paths, or their count and common folder when there are many."""
    if not sources:
        return "a Dataset"
    if len(sources) <= 3:
        return ", ".join(html.escape(s) for s in sources)
    common = os.path.commonpath([os.path.abspath(s) for s in sources])
    where = os.path.relpath(common) if common.startswith(os.getcwd()) else common
    return f"{len(sources):,} paths under {html.escape(where)}"


def _runs_section(ds: xr.Dataset, pop: xr.Dataset) -> str:
    """One row per run: ranks, nodes, mode, elapsed as stated and the parallel region, format."""
    def coord(name: str, i: int) -> Any:
        return ds[name].values[i] if name in ds.coords else None

    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        nprocs, nodes, elapsed = coord("nprocs", i), coord("nodes", i), coord("elapsed", i)
        rows.append(f"<tr><td>{html.escape(run)}</td><td class=\"num\">{_or_dash(fmt.count, nprocs)}</td>"
                    f"<td class=\"num\">{_or_dash(fmt.count, nodes)}</td><td>{html.escape(str(coord('mode', i) or ''))}"
                    f"</td><td class=\"num\">{_or_dash(fmt.seconds, elapsed)}</td>"
                    f"<td class=\"num\">{_or_dash(fmt.seconds, pop['elapsed'].values[i])}</td>"
                    f"<td>{html.escape(str(coord('format', i) or ''))}</td></tr>")
    return ("<h2>Runs</h2>\n<table><tr><th>run</th><th>ranks</th><th>nodes</th><th>mode</th><th>elapsed</th>"
            "<th>parallel region</th><th>format</th></tr>\n" + "\n".join(rows) + "</table>\n<p class=\"note\">"
            "Elapsed as the profile states it; the parallel region leaves start-up and shut-down out, and the "
            "efficiencies and findings are of it.</p>")


def _or_dash(formatter: Any, value: Any) -> str:
    return "–" if fmt.missing(value) or value == "" else formatter(float(value))


def _pop_section(pop: xr.Dataset) -> str:
    from perfkit.plots.pop import pop_styler

    table = pop_styler(pop).hide(axis="index", names=True).to_html()
    return ("<h2>POP efficiencies</h2>\n<p class=\"note\">Parallel efficiency = load balance × communication "
            "efficiency; communication efficiency = serialisation × transfer efficiency. 1 is ideal.</p>\n"
            f"<div class=\"wide\">{table}</div>")


def _scaling_section(ds: xr.Dataset, pop: xr.Dataset, plots: dict[str, Any]) -> str:
    """Elapsed, speed-up and efficiency against the process count, and the POP factors across the runs."""
    from perfkit.analysis.scaling import scaling
    from perfkit.plots.pop import pop_plot
    from perfkit.plots.scaling import efficiency_vs_procs, speedup_vs_procs, time_vs_procs
    from perfkit.widgets.explorer import has_scaling

    if not has_scaling(ds) or len(set(ds["nprocs"].values.astype(float))) < 2:
        return ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = scaling(ds)
    except ValueError as exc:
        return f"<h2>Scaling</h2>\n<p class=\"note\">No scaling plots: {html.escape(str(exc))}.</p>"
    wide = {"responsive": True, "min_width": 500, "height": 340}
    plots["elapsed"] = time_vs_procs(table).opts(**wide)
    plots["speedup"] = speedup_vs_procs(table).opts(**wide)
    plots["efficiency"] = efficiency_vs_procs(table).opts(**wide)
    plots["pop"] = pop_plot(pop).opts(title="POP efficiencies across the runs", **wide)
    return "<h2>Scaling</h2>\n" + "\n".join(f"<!--plot:{k}-->" for k in ("elapsed", "speedup", "efficiency", "pop"))


def _findings_section(findings: pd.DataFrame) -> str:
    """The findings, most time at stake first: severity, run, time at stake, title and lead; details on a click."""
    from perfkit.commands.analyses import caveats_of
    from perfkit.plots.imbalance import SEVERITY

    rows = []
    for i, row in enumerate(findings.to_dict("records"), 1):
        tint = SEVERITY.get(row["severity"], "#ffffff")
        details = (f"<details><summary>details</summary><p>{_prose(row['details'])}</p></details>"
                   if row["details"] else "")
        rows.append(f"<tr><td class=\"num\">{i}</td><td><span class=\"severity\" style=\"background:{tint}\">"
                    f"{html.escape(row['severity'])}</span></td><td>{html.escape(row['run'])}</td>"
                    f"<td class=\"num\">{_or_dash(fmt.seconds, row['seconds'])}</td>"
                    f"<td class=\"num\">{_or_dash(fmt.percent, row['share'])}</td>"
                    f"<td class=\"lead\"><b>{html.escape(row['title'])}</b><br>{_prose(row['lead'])}{details}</td>"
                    "</tr>")
    caveats = caveats_of(findings) if len(findings) else []
    notes = ("<h3>Caveats</h3>\n<ul class=\"caveats\">" + "".join(f"<li>{_prose(c)}</li>" for c in caveats)
             + "</ul>") if caveats else ""
    return ("<h2>Findings</h2>\n<p class=\"note\">Most time at stake first. At stake: the time per rank the cause "
            "costs the elapsed time at most.</p>\n<table class=\"findings\"><tr><th>#</th><th>severity</th>"
            "<th>run</th><th>at stake</th><th>of elapsed</th><th>finding</th></tr>\n" + "\n".join(rows)
            + "</table>\n" + notes)


def _prose(text: str) -> str:
    """``text`` escaped for HTML, with `commands` in backquotes as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _per_run_section(ds: xr.Dataset, runs: list[str], findings: pd.DataFrame, plots: dict[str, Any]) -> str:
    """Per run with measured time: the stacked time per rank by function and, with matrices, the traffic heatmap."""
    from perfkit.plots.axes import integer_ticker
    from perfkit.plots.profile import stacked_ranks

    measured = ds["profile"].sel(metric="time").notnull().any(("rank", "function")).values
    shown = [run for run, ok in zip(runs, measured) if ok]
    parts = ["<h2>Per run</h2>"]
    if len(shown) > MAX_RUN_PLOTS:
        parts.append(f"<p class=\"note\">Plots of the first {MAX_RUN_PLOTS} of the {len(shown)} runs with "
                     "measured time.</p>")
    for i, run in enumerate(shown[:MAX_RUN_PLOTS]):
        parts.append(f"<h3>{html.escape(run)}</h3>")
        plots[f"ranks{i}"] = stacked_ranks(ds, run).opts(responsive=True, min_width=500, height=360,
                                                         xticks=integer_ticker())
        parts.append(f"<!--plot:ranks{i}-->")
        heat = _traffic(ds, run)
        if heat is not None:
            plots[f"traffic{i}"] = heat
            parts.append(f"<!--plot:traffic{i}-->")
    if len(shown) < len(runs):
        missing = ", ".join(html.escape(r) for r in runs if r not in shown)
        parts.append(f"<p class=\"note\">No per-rank times in {missing}.</p>")
    return "\n".join(parts)


def _traffic(ds: xr.Dataset, run: str) -> Any:
    """The sender x receiver bytes heatmap of ``run``, or None when it has no matrix."""
    from perfkit.analysis.traffic import traffic_matrix
    from perfkit.plots.traffic import heatmap

    if "traffic" not in ds or "bytes" not in set(map(str, ds["quantity"].values)):
        return None
    if traffic_matrix(ds["traffic"], run=run, quantity="bytes").nnz == 0:
        return None
    return heatmap(ds["traffic"], run=run, title=f"{run}: bytes sent, sender x receiver")
