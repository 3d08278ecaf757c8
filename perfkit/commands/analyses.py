"""``perfkit diagnose|whatif|pop|scaling|compare``: the analyses of ``perfkit.analysis`` from a shell.

Each command reads profiles (files, glob patterns, or stores written by ``perfkit convert``),
runs one analysis and prints its tables (``perfkit.commands.render``): aligned text by default,
``--format json|markdown|csv`` for scripts. Exit status: 0 when the tables were printed, 1 when a
file could not be read or the analysis failed (the reason on standard error), 2 on a usage error.
``COMMANDS`` maps each name to its help and ``configure(parser) -> run(args) -> exit status``;
``perfkit.cli`` registers them. Heavy imports happen in the run functions.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from perfkit.commands.render import FORMATS, Column, Table, render
from perfkit.errors import PerfkitFormatError
from perfkit.runs import run_labels, select, select_one
from perfkit.text import number, plural

if TYPE_CHECKING:
    import xarray as xr

Runner = Callable[[argparse.Namespace], int]
EXIT_STATUS = "exit status: 0 printed, 1 a file could not be read or the analysis failed, 2 usage error"


def _inputs(parser: argparse.ArgumentParser, *, many: bool = True) -> None:
    """The options every analysis command shares: what to read and how to print."""
    from perfkit.cli import _errors_option

    if many:
        parser.add_argument("paths", nargs="+", metavar="FILES",
                            help="profiles, glob patterns, or stores written by 'perfkit convert' (*.zarr, *.nc)")
        parser.add_argument("--run", action="append", dest="runs", metavar="LABEL",
                            help="analyse only this run: its label or a glob pattern of labels ('*-np4'); repeat "
                                 "for several (default: every run)")
    parser.add_argument("--input-format", default=None, metavar="FORMAT",
                        help="read the profiles as this format instead of sniffing it")
    parser.add_argument("-f", "--format", choices=FORMATS, default="text",
                        help="output: an aligned text table (default), json, markdown or csv")
    _errors_option(parser)
    parser.epilog = EXIT_STATUS


def load_runs(patterns: Sequence[str], input_format: str | None = None, errors: str = "raise",
              runs: Sequence[str] | None = None) -> xr.Dataset:
    """The runs of ``patterns`` (profiles and globs read with ``open_runs``, stores with ``perfkit.load``,
    lazily), combined along ``run``; only those ``runs`` name when given (labels or glob patterns,
    ``perfkit.runs``), in the order named. Refused files are listed on stderr."""
    import perfkit
    from perfkit.cli import _print_refused, _quiet
    from perfkit.io.open import expand_paths
    from perfkit.storage import STORE_SUFFIXES

    paths = [path for pattern in patterns for path in expand_paths(pattern)]
    stores = []
    for path in (p for p in paths if p.suffix in STORE_SUFFIXES):
        try:
            stores.append(perfkit.load(path, chunks={}))
        except PerfkitFormatError as exc:  # not a store perfkit wrote (a netCDF of something else)
            if errors == "raise":
                raise
            print(f"refused: {exc}", file=sys.stderr)
    files = [path for path in paths if path.suffix not in STORE_SUFFIXES]
    datasets = stores
    if files:
        opened = perfkit.open_runs(files, format=input_format, progress=False, errors=_quiet(errors))
        _print_refused(opened)
        datasets = [*stores, opened]
    ds = datasets[0] if len(datasets) == 1 else perfkit.combine_runs(datasets)
    if runs:
        ds = ds.isel(run=select(run_labels(ds), runs, patterns[0] if len(patterns) == 1 else "the data"))
    return ds


def _emit(tables: Sequence[Table], fmt: str, after: str = "") -> int:
    print(render(tables, fmt) + after, end="")
    return 0


# diagnose

def configure_diagnose(parser: argparse.ArgumentParser) -> Runner:
    _inputs(parser)
    parser.add_argument("--top", type=_count, default=None, metavar="N", help="only the N findings with most at stake")
    parser.add_argument("--brief", action="store_true", help="text and markdown: the table only, not each finding's "
                                                             "explanation")
    return run_diagnose


def _count(text: str) -> int:
    from perfkit.cli import _number

    return _number(int, 1)(text)


def run_diagnose(args: argparse.Namespace) -> int:
    from perfkit.analysis.diagnosis import diagnose

    ds = load_runs(args.paths, args.input_format, args.errors, args.runs)
    findings = diagnose(ds)
    if args.top is not None:
        findings = findings.head(args.top)
    table = diagnosis_table(findings, int(ds.sizes["run"]))
    details = "" if args.brief else _details(findings, args.format)
    return _emit([table], args.format, details)


def diagnosis_table(findings: Any, runs: int) -> Table:
    """The ``diagnose`` findings as a table, most time at stake first."""
    rows = [{"number": i + 1, **row} for i, row in enumerate(findings.to_dict("records"))]
    columns = [
        Column("number", "#", "count"), Column("run", "run"), Column("severity", "severity"),
        Column("seconds", "at stake", "s", missing="none"), Column("share", "of elapsed", "percent", missing="none"),
        Column("category", "category", shown="data"), Column("title", "finding"),
        Column("lead", "lead", shown="data"), Column("details", "details", shown="data"),
        Column("caveats", "caveats", shown="data"), Column("text", "text", shown="data"),
    ]
    title = f"Findings: {plural(len(rows), 'finding')} for {plural(runs, 'run')}, most time at stake first"
    notes = ["at stake: the time per rank the cause costs the elapsed time at most"] if rows else []
    return Table("findings", title, columns, rows, notes)


def caveats_of(findings: Any) -> list[str]:
    """The sentences of the caveats the findings name (``diagnosis.CAVEATS``), each once, in order of first use."""
    from perfkit.analysis.diagnosis import CAVEATS

    keys = dict.fromkeys(key for keys in findings["caveats"] for key in str(keys).split())
    return [CAVEATS[key] for key in keys]


_QUANTITY = re.compile(r"(\d) (?=(µs|ms|s|min|h|[kMGTP]?B|[kMGTP]?B/s|[kMGTP]?bit/s)\b)")


def _fill(text: str, indent: int) -> str:
    """``text`` wrapped at 100 columns, continuation lines indented, never between a number and its unit."""
    kept = _QUANTITY.sub("\\1\u00a0", text)
    return textwrap.fill(kept, 100, subsequent_indent=" " * indent).replace("\u00a0", " ")


def _details(findings: Any, fmt: str) -> str:
    """Each finding's lead and details, numbered as in the table, then the shared caveats once (text and
    markdown only)."""
    texts = [f"{lead} {details}".strip() for lead, details in zip(findings["lead"], findings["details"])]
    caveats = caveats_of(findings)
    if fmt == "text" and texts:
        lines = [_fill(f"{i:>3}. {text}", 5) for i, text in enumerate(texts, 1)]
        if caveats:
            lines += ["", "Caveats:", *(_fill(f"  - {text}", 4) for text in caveats)]
        return "\n" + "\n".join(lines) + "\n"
    if fmt == "markdown" and texts:
        lines = [f"{i}. {text}" for i, text in enumerate(texts, 1)]
        if caveats:
            lines += ["", "**Caveats**", "", *(f"- {text}" for text in caveats)]
        return "\n" + "\n".join(lines) + "\n"
    return ""


# whatif

def configure_whatif(parser: argparse.ArgumentParser) -> Runner:
    from perfkit.analysis.whatif import SCENARIOS
    from perfkit.cli import _number

    parser.add_argument("scenario", choices=SCENARIOS,
                        help="perfect_network: transfers take no time; network: latency and bandwidth K times better; "
                             "compute: compute K times faster; balance: every rank computes the mean; "
                             "drop_slowest: the K ranks with most compute left out (or --ranks)")
    _inputs(parser)
    parser.add_argument("-k", type=_number(float, 0, above=True), default=2.0, metavar="K",
                        help="the factor of network and compute, the number of ranks of drop_slowest (default 2)")
    parser.add_argument("--ranks", type=_rank_list, default=None, metavar="R,R,...",
                        help="drop_slowest: leave out these ranks instead of the K with most compute")
    return run_whatif


def _rank_list(text: str) -> list[int]:
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ranks: {text!r}") from None
    if not ranks or min(ranks) < 0:
        raise argparse.ArgumentTypeError(f"ranks must be integers >= 0, got {text!r}")
    return ranks


def run_whatif(args: argparse.Namespace) -> int:
    from perfkit.analysis.whatif import whatif

    if args.ranks is not None and args.scenario != "drop_slowest":
        raise ValueError("--ranks applies to the drop_slowest scenario only")
    if args.scenario == "drop_slowest" and args.ranks is None and args.k != int(args.k):
        raise ValueError(f"drop_slowest: K is a number of ranks, got {args.k:g}")
    ds = load_runs(args.paths, args.input_format, args.errors, args.runs)
    if args.scenario == "drop_slowest":
        _check_dropped(ds, args.k, args.ranks)
    result = whatif(ds, args.scenario, args.k, ranks=args.ranks)
    return _emit([whatif_table(result, args.scenario, args.k, args.ranks)], args.format)


def _check_dropped(ds: xr.Dataset, k: float, ranks: Sequence[int] | None) -> None:
    """drop_slowest leaves out ranks every run has and keeps one at least: a ``UsageError`` naming the range."""
    import numpy as np

    from perfkit.cli import UsageError

    nprocs = ds["nprocs"].values if "nprocs" in ds.coords else np.array([ds.sizes["rank"]])
    n = int(np.nanmin(nprocs)) if np.isfinite(nprocs).any() else ds.sizes["rank"]
    runs = "the run has" if ds.sizes["run"] == 1 else "every run has"
    if ranks is None and k > n - 1:
        raise UsageError(f"-k {k:g}: drop_slowest leaves out 1..{n - 1} ranks ({runs} {plural(n, 'rank')})")
    if ranks is not None and (max(ranks) >= n or len(set(ranks)) >= n):
        wrong = ",".join(map(str, ranks))
        raise UsageError(f"--ranks {wrong}: {runs} ranks 0..{n - 1}; at most {n - 1} of them can be left out")


def whatif_title(scenario: str, k: float, ranks: Sequence[int] | None = None) -> str:
    """What the scenario changes, in words."""
    if scenario == "drop_slowest":
        left_out = (f"ranks {', '.join(map(str, ranks))}" if ranks is not None
                    else f"the {plural(int(k), 'rank')} with most compute")
        return f"What if {left_out} were left out (their compute spread over the others)"
    return {"perfect_network": "What if the network were perfect (transfers take no time, waits remain)",
            "network": f"What if the network were {number(k)} times faster (latency and bandwidth)",
            "compute": f"What if compute were {number(k)} times faster",
            "balance": "What if compute were balanced (every rank computes the mean)"}[scenario]


def whatif_table(result: xr.Dataset, scenario: str, k: float, ranks: Sequence[int] | None = None) -> Table:
    """One row per run of a ``whatif`` result: elapsed before and after [s], saving [s], speed-up and its range."""
    rows = []
    for i, run in enumerate(map(str, result["run"].values)):
        row = {name: float(result[name].values[i]) for name in
               ("elapsed_before", "elapsed_after", "saving", "speedup", "speedup_low", "speedup_high",
                "dynamic_imbalance")}
        row.update(run=run, waits="estimated" if bool(result["estimated"].values[i]) else "measured")
        low, high = row["speedup_low"], row["speedup_high"]
        replayed = "basis" in result and str(result["basis"].values[i]) == "replayed"
        row["range"] = "replayed" if replayed else f"{low:.2f}-{high:.2f}" if low == low and high == high else ""
        rows.append(row)
    columns = [
        Column("run", "run"), Column("elapsed_before", "elapsed", "s"), Column("elapsed_after", "predicted", "s"),
        Column("saving", "saving", "s"), Column("speedup", "speed-up", "ratio"),
        Column("range", "range", shown="text"),
        Column("speedup_low", "speed-up low", "ratio", shown="data"),
        Column("speedup_high", "speed-up high", "ratio", shown="data"),
        Column("dynamic_imbalance", "dynamic imbalance", "s"), Column("waits", "waits"),
    ]
    notes = ["range: the dynamic imbalance (time even the busiest rank waits) left as it is, or gone as far as "
             "the scenario could take it"]
    if any(row["range"] == "replayed" for row in rows):
        notes.append("replayed: a trace's events replayed on an ideal network, one answer rather than a range")
    if any(row["waits"] == "estimated" for row in rows):
        notes.append("estimated waits (from per-call times) add an error the range does not cover")
    return Table("whatif", whatif_title(scenario, k, ranks), columns, rows, notes)


# pop

POP_ABBREVIATIONS = {
    "global_efficiency": "GE", "parallel_efficiency": "PE", "load_balance": "LB",
    "communication_efficiency": "CommE", "serialisation_efficiency": "SerE", "transfer_efficiency": "TrE",
    "computation_scalability": "CS",
}


def configure_pop(parser: argparse.ArgumentParser) -> Runner:
    _inputs(parser)
    parser.add_argument("--reference", metavar="LABEL", help="the run computation scalability is measured against "
                                                             "(default: the one with fewest ranks)")
    parser.add_argument("--weak", action="store_true", help="the runs are a weak-scaling series (default: what the "
                                                            "runs' scaling metadata says)")
    return run_pop


def run_pop(args: argparse.Namespace) -> int:
    from perfkit.analysis.pop import pop_metrics

    ds = load_runs(args.paths, args.input_format, args.errors, args.runs)
    pop = pop_metrics(ds, reference=args.reference, weak=True if args.weak else None)
    return _emit([pop_table(pop)], args.format)


#: Columns of the POP table where CPU was measured: useful compute in wall and CPU time, CPU availability.
_CPU_COLUMNS = {"useful_mean": ("compute wall", "s"), "useful_cpu_mean": ("compute CPU", "s"),
                "cpu_availability": ("CPU avail.", "ratio")}


def pop_table(pop: xr.Dataset) -> Table:
    """One row per run: ranks, elapsed [s] and the POP efficiencies, with where each comes from."""
    from perfkit.analysis.pop import EFFICIENCIES, LABELS

    efficiencies = list(pop["efficiency"].values)
    rows = []
    for i, run in enumerate(map(str, pop["run"].values)):
        row: dict[str, Any] = {"run": run, "nprocs": float(pop["nprocs"].values[i]) if "nprocs" in pop.coords else None,
                               "elapsed": float(pop["elapsed"].values[i])}
        for name in EFFICIENCIES:
            j = efficiencies.index(name)
            row[name] = float(pop[name].values[i])
            row[f"{name}_evidence"] = str(pop["evidence"].values[i, j])
            row[f"{name}_note"] = str(pop["note"].values[i, j])
        row.update({name: float(pop[name].values[i]) for name in _CPU_COLUMNS if name in pop.data_vars})
        rows.append(row)

    def modelled(name: str) -> Callable[[dict[str, Any]], str]:
        return lambda row: "*" if row[f"{name}_evidence"] == "modelled" else ""

    columns = [Column("run", "run"), Column("nprocs", "ranks", "count", missing="unknown"),
               Column("elapsed", "elapsed", "s")]
    for name in EFFICIENCIES:
        columns += [Column(name, POP_ABBREVIATIONS[name], "ratio", mark=modelled(name)),
                    Column(f"{name}_evidence", f"{LABELS[name]} evidence", shown="data"),
                    Column(f"{name}_note", f"{LABELS[name]} note", shown="data")]
    notes = ["GE global efficiency = PE parallel efficiency x CS computation scalability; PE = LB load balance x "
             "CommE communication efficiency; CommE = SerE serialisation x TrE transfer efficiency",
             "elapsed: the parallel region (start-up and shut-down left out)"]
    if "cpu_availability" in pop.data_vars:
        columns += [Column(name, header, kind, missing="not measured") for name, (header, kind) in _CPU_COLUMNS.items()]
        notes.append("compute wall / CPU: mean useful compute per rank in wall time and on a CPU; CPU avail. = CPU / "
                     "wall time of all ranks' compute (below 1: compute waited for a core, slept or waited for I/O)")
    evidence = {row[f"{name}_evidence"] for row in rows for name in EFFICIENCIES}
    if "modelled" in evidence:
        notes.append("* modelled: some waits estimated from per-call times (the fastest rank's time is transfer, "
                     "the rest waiting); measured waits (perfkit collect --slt --collective-wait) make it exact")
    if "unavailable" in evidence:
        notes.append("not measured: the profile has no per-rank times")
    title = f"POP efficiencies of {plural(len(rows), 'run')} (1 is ideal)"
    return Table("pop", title, columns, rows, notes)


# scaling

def configure_scaling(parser: argparse.ArgumentParser) -> Runner:
    _inputs(parser)
    parser.add_argument("--kind", choices=("strong", "weak"), default=None,
                        help="strong (fixed total problem) or weak (fixed work per rank) scaling "
                             "(default: what the runs state, else strong)")
    parser.add_argument("--base", default=None, metavar="N|LABEL",
                        help="the reference: a process count or a run label (default: the fewest ranks)")
    return run_scaling


def run_scaling(args: argparse.Namespace) -> int:
    ds = load_runs(args.paths, args.input_format, args.errors, args.runs)
    base: float | str | None = args.base
    if base is not None and base not in set(map(str, ds["run"].values)):
        try:
            base = float(base)
        except ValueError:
            raise ValueError(f"--base {args.base!r} is neither a process count nor one of the runs "
                             f"({', '.join(map(str, ds['run'].values))})") from None
    return _emit([scaling_table(timed_scaling(ds, args.kind, base))], args.format)


#: What a run whose elapsed time is 0 gets instead of a speed-up.
ZERO_TIME = "elapsed time is 0 s (no time measured)"
ZERO_ELAPSED = f"{ZERO_TIME}: left out of the speed-ups and the base"


def timed_scaling(ds: xr.Dataset, kind: str | None, base: float | str | None) -> Any:
    """``scaling`` of the runs with time measured; a run whose elapsed time is 0 is kept as a row without
    speed-up, efficiency or jobs per day, with ``note`` ``ZERO_ELAPSED`` (``ValueError`` when every run is)."""
    import numpy as np
    import pandas as pd

    from perfkit.analysis.scaling import scaling

    table = scaling(ds, kind=kind, base=base)
    zero = table["run"][~(table["elapsed"] > 0)].tolist()
    if not zero:
        return table
    if base in zero or len(zero) == len(table):
        named = base if base in zero else ", ".join(zero)
        raise ValueError(f"{named}: {ZERO_TIME}; there is no time to scale against")
    measured = scaling(ds.isel(run=~np.isin(ds["run"].values.astype(str), zero)), kind=kind, base=base)
    undefined = ("speedup", "efficiency", "jobs_per_day", "jobs_per_hour", "base_nprocs", "base_value")
    marked = table[table["run"].isin(zero)].assign(**dict.fromkeys(undefined, np.nan), note=ZERO_ELAPSED)
    out = pd.concat([measured, marked]).set_index("run").loc[table["run"]].reset_index()
    out.attrs = measured.attrs
    return out


def scaling_table(table: Any) -> Table:
    """The ``scaling`` table: one row per run, elapsed [s], speed-up and efficiency against the base."""
    rows = table.to_dict("records")
    columns = [
        Column("run", "run"), Column("nprocs", "ranks", "count"),
        Column("nodes", "nodes", "count", missing="unknown"),
        Column("ppn", "ranks per node", "count", missing="unknown"),
        Column("elapsed", "elapsed", "s"), Column("speedup", "speed-up", "ratio"),
        Column("ideal_speedup", "ideal", "ratio"), Column("efficiency", "efficiency", "ratio"),
        Column("scaling", "scaling"), Column("jobs_per_day", "jobs per day", "count"),
        Column("source", "elapsed from", shown="data"), Column("base_nprocs", "base ranks", "count", shown="data"),
        Column("base_value", "base elapsed", "s", shown="data"),
        Column("jobs_per_hour", "jobs per hour", "count", shown="data"), Column("note", "note", shown="data"),
    ]
    bases = sorted({int(n) for n in table["base_nprocs"].dropna()})
    notes = [f"against the runs at {' and '.join(plural(n, 'rank') for n in bases)}; {table.attrs['kind']} scaling: "
             f"{table.attrs['kind_source']}"]
    notes += [f"{row['run']}: {row['note']}" for row in rows if isinstance(row.get("note"), str)]
    return Table("scaling", f"Scaling of {plural(len(rows), 'run')}", columns, rows, notes)


# compare

def configure_compare(parser: argparse.ArgumentParser) -> Runner:
    parser.add_argument("a", metavar="A", help="the first run: a profile or a store (*.zarr, *.nc)")
    parser.add_argument("b", metavar="B", help="the second run, subtracted from the first")
    parser.add_argument("--run-a", metavar="LABEL", help="the run of A, when A holds several")
    parser.add_argument("--run-b", metavar="LABEL", help="the run of B, when B holds several")
    _inputs(parser, many=False)
    return run_compare


def run_compare(args: argparse.Namespace) -> int:
    a = _one_run(args.a, args.run_a, args.input_format, args.errors, "--run-a")
    b = _one_run(args.b, args.run_b, args.input_format, args.errors, "--run-b")
    return _emit(compare_tables(a, b), args.format)


def _one_run(pattern: str, run: str | None, input_format: str | None, errors: str, option: str) -> xr.Dataset:
    ds = load_runs([pattern], input_format, errors)
    return ds.isel(run=[select_one(run_labels(ds), run, pattern, f"one with {option}")])


def run_totals(ds: xr.Dataset) -> dict[str, Any]:
    """One run's totals: per MPI function mean time per rank [s] and bytes sent + received over ranks [B],
    per rank MPI time [s] and bytes [B], elapsed and the parallel region (``pop_metrics``) [s], mean
    compute and MPI time per rank [s], ranks."""
    import numpy as np
    import pandas as pd

    from perfkit.analysis.pop import pop_metrics

    profile = ds["profile"].isel(run=0).load()
    metrics = [str(m) for m in profile["metric"].values]

    def metric(name: str) -> np.ndarray:
        shape = profile.shape[:2]
        return profile.values[..., metrics.index(name)] if name in metrics else np.full(shape, np.nan)

    time = metric("time")
    moved = np.where(np.isnan(metric("bytes_sent")) & np.isnan(metric("bytes_recv")), np.nan,
                     np.nan_to_num(metric("bytes_sent")) + np.nan_to_num(metric("bytes_recv")))
    exists = ~np.isnan(time).all(axis=1)
    kinds = np.asarray([str(k) for k in profile["kind"].values])
    mpi = kinds != "compute"
    functions = [str(f) for f in profile["function"].values]
    ranks = profile["rank"].values[exists]

    def total(values: np.ndarray, axis: int) -> np.ndarray:
        return np.where(np.isnan(values).all(axis=axis), np.nan, np.nansum(values, axis=axis))

    rank_time = total(time[exists][:, mpi], 1)
    rank_bytes = total(moved[exists][:, mpi], 1)
    by_function = pd.DataFrame({"time": total(time[exists], 0) / max(int(exists.sum()), 1),
                                "bytes": total(moved[exists], 0), "kind": kinds}, index=functions)
    given = float(ds["elapsed"].values[0]) if "elapsed" in ds.coords else np.nan
    longest = float(np.nanmax(total(time[exists], 1))) if exists.any() else np.nan
    compute = total(time[exists][:, ~mpi], 1)
    return {
        "label": str(ds["run"].values[0]), "elapsed": given if given == given else longest,
        "region": float(pop_metrics(ds)["elapsed"].values[0]),
        "compute": float(np.nanmean(compute)) if (~np.isnan(compute)).any() else np.nan,
        "mpi": float(np.nanmean(rank_time)) if (~np.isnan(rank_time)).any() else np.nan,
        "bytes": float(np.nansum(rank_bytes)) if (~np.isnan(rank_bytes)).any() else np.nan,
        "ranks": int(exists.sum()),
        "functions": by_function[by_function["kind"] != "compute"],
        "per_rank": pd.DataFrame({"time": rank_time, "bytes": rank_bytes}, index=ranks),
    }


def _difference(a: float, b: float) -> tuple[float, float]:
    """A - B and (A - B) / B (NaN when B is 0 or either is missing)."""
    diff = a - b
    return diff, diff / b if b else float("nan")


def compare_tables(a_ds: xr.Dataset, b_ds: xr.Dataset) -> list[Table]:
    """A - B for two runs: a summary, per MPI function and per rank, time [s] and bytes [B]."""
    a, b = run_totals(a_ds), run_totals(b_ds)
    same = a["label"] == b["label"]
    name_a, name_b = (f"A ({a['label']})", f"B ({b['label']})") if not same else ("A", "B")
    summary = []
    for key, quantity, unit in (("elapsed", "elapsed", "s"), ("region", "parallel region", "s"),
                                ("compute", "compute per rank", "s"),
                                ("mpi", "MPI time per rank", "s"), ("bytes", "bytes sent + received", "B"),
                                ("ranks", "ranks", "count")):
        diff, change = _difference(a[key], b[key])
        summary.append({"quantity": quantity, "unit": unit, "a": a[key], "b": b[key], "difference": diff,
                        "change": change})
    value = [Column("a", name_a, "row"), Column("b", name_b, "row"),
             Column("difference", "A - B", "row", signed=True, missing="-"),
             Column("change", "change", "percent", signed=True, missing="-")]
    tables = [Table("summary", f"A - B: A = {a['label']}, B = {b['label']}", [Column("quantity", "quantity"),
                                                                            Column("unit", "unit", shown="data"),
                                                                            *value], summary)]
    functions = a["functions"].add_suffix("_a").join(b["functions"].add_suffix("_b"), how="outer")
    rows = []
    for function, rec in functions.iterrows():
        time_diff, time_change = _difference(rec["time_a"], rec["time_b"])
        rows.append({"function": function, "time_a": rec["time_a"], "time_b": rec["time_b"],
                     "time_difference": time_diff, "time_change": time_change, "bytes_a": rec["bytes_a"],
                     "bytes_b": rec["bytes_b"], "bytes_difference": rec["bytes_a"] - rec["bytes_b"]})
    rows.sort(key=lambda row: -abs(row["time_difference"]) if row["time_difference"] == row["time_difference"]
              else 0.0)
    tables.append(Table("functions", "Per MPI function: time (mean per rank) and bytes (all ranks), largest "
                                     "difference first", [Column("function", "function"), *_pair("time", "s"),
                                                          Column("time_change", "change", "percent", signed=True,
                                                                 missing="-"), *_pair("bytes", "B")], rows))
    ranks = a["per_rank"].add_suffix("_a").join(b["per_rank"].add_suffix("_b"), how="outer")
    rows = [{"rank": int(rank), "time_a": rec["time_a"], "time_b": rec["time_b"],
             "time_difference": rec["time_a"] - rec["time_b"], "bytes_a": rec["bytes_a"], "bytes_b": rec["bytes_b"],
             "bytes_difference": rec["bytes_a"] - rec["bytes_b"]} for rank, rec in ranks.iterrows()]
    tables.append(Table("ranks", "Per rank: MPI time and bytes sent + received", [Column("rank", "rank", "count"),
                                                                                 *_pair("time", "s"),
                                                                                 *_pair("bytes", "B")], rows))
    return tables


def _pair(quantity: str, unit: str) -> list[Column]:
    """Columns ``<quantity>_a``, ``_b`` and ``_difference`` (A - B)."""
    return [Column(f"{quantity}_a", f"{quantity} A", unit, missing="not in run"),
            Column(f"{quantity}_b", f"{quantity} B", unit, missing="not in run"),
            Column(f"{quantity}_difference", "A - B", unit, signed=True, missing="-")]


def _configure_report(parser: argparse.ArgumentParser) -> Runner:
    from perfkit.commands.report import configure_report

    return configure_report(parser)


def _configure_explore(parser: argparse.ArgumentParser) -> Runner:
    from perfkit.commands.explore import configure_explore

    return configure_explore(parser)


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], Runner]]] = {
    "diagnose": ("Findings: what limits each run, most time at stake first, with the evidence.", configure_diagnose),
    "whatif": ("Predicted elapsed time if the network, compute or balance were better.", configure_whatif),
    "pop": ("POP efficiencies per run: load balance, communication, serialisation, transfer, scalability.",
            configure_pop),
    "scaling": ("Scaling table: elapsed time, speed-up and efficiency against the smallest run.", configure_scaling),
    "compare": ("Run against run: A - B per MPI function and per rank, time and bytes.", configure_compare),
    "report": ("One self-contained HTML page: POP table, scaling plots, findings, per-rank profiles and traffic.",
               _configure_report),
    "explore": ("Serve the explorer dashboard of these runs in a browser (panel, on this machine).",
                _configure_explore),
}
