"""Scaling tables: elapsed time, speedup, efficiency and throughput versus process count.

:func:`scaling` turns runs (a multi-run canonical Dataset, a pandas DataFrame or plain arrays)
into one tidy :class:`pandas.DataFrame`, one row per run (and per function / kind / call when
``group`` is given). Columns:

* the ``by`` columns (one curve per combination), the group column (``function``, ``kind`` or
  ``call``) when asked, ``run``, ``nprocs`` and, from a Dataset, ``nodes``, ``ppn``, ``threads``;
* the value: ``elapsed`` [s] for ``metric="time"``, else a column named after the metric
  (e.g. ``bytes_sent`` [B]); ``source`` says how each value was obtained;
* ``base_nprocs``, ``base_value``: the reference each curve is measured against (its smallest
  process count unless ``base`` says otherwise; repeated base runs are averaged);
* ``scaling``: ``strong`` or ``weak``, per curve: the ``kind`` argument, else the runs' ``scaling``
  run coordinate, else ``strong`` (``attrs["kind_source"]`` says which);
* time only: ``ideal_speedup`` = N / N_base, ``speedup``, ``efficiency`` (strong:
  speedup = T_base / T(N), efficiency = speedup / ideal; weak: efficiency = T_base / T(N),
  speedup = efficiency * ideal, Gustafson's scaled speedup), and, for whole runs,
  ``jobs_per_hour`` = 3600 / elapsed and ``jobs_per_day`` = 86400 / elapsed per job slot, times
  the number of jobs that fit side by side when ``system_size`` is given;
  ``normalised_speedup`` = (slowest base time among the curves) / T(N) when ``normalise=True``;
* other metrics: ``ratio`` = value / base value.

``table.attrs`` records the metric, the value column, its units, the scaling kind, how elapsed
times were obtained and the reference each curve used.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.cube import evaluate, group_sum, per_rank, with_loaded_coords
from perfkit.errors import PerfkitWarning

RUN_NUMBERS = ("nodes", "ppn", "threads")
GROUPS = ("function", "kind", "call")
SOURCE_ELAPSED = "elapsed coordinate"
SOURCE_GIVEN = "given"

ByArg = str | Sequence[str] | Mapping[str, Sequence[Any]] | None


def scaling(
    data: xr.Dataset | pd.DataFrame | Sequence[float] | np.ndarray | None = None,
    *,
    nprocs: Sequence[float] | np.ndarray | str | None = None,
    elapsed: Sequence[float] | np.ndarray | str | None = None,
    by: ByArg = None,
    base: float | str | None = None,
    kind: Literal["strong", "weak"] | None = None,
    metric: str = "time",
    group: str | None = None,
    reduce: Literal["max", "mean", "sum", "min"] | None = None,
    normalise: bool = False,
    system_size: float | None = None,
    system_unit: Literal["nprocs", "nodes"] = "nprocs",
) -> pd.DataFrame:
    """Scaling table of runs: elapsed [s] (or any metric), speedup, efficiency, jobs/day.

    ``data`` is a canonical Dataset, a DataFrame (then ``nprocs``/``elapsed``/``by`` name its
    columns, defaults ``"nprocs"`` and ``"elapsed"``) or the process counts themselves (then
    ``elapsed`` holds the times [s] and ``by`` may map a name to one label per run).
    From a Dataset a run's elapsed time is its ``elapsed`` coordinate when known, else the
    slowest rank's total ``time`` over functions; ``group`` ("function", "kind", "call") gives
    one curve per group, ``reduce`` how ranks combine ("max" for time, "sum" otherwise).
    ``base`` is a process count or a run label; ``system_size`` (in ``system_unit``) is the size
    of the unit ("system") jobs/day are counted for. ``kind`` ("strong": fixed total problem,
    "weak": fixed work per process) defaults to what the runs state (run coordinate ``scaling``,
    or a ``scaling`` column), else "strong"; a ``kind`` contradicting the runs is an error.
    """
    if kind not in ("strong", "weak", None):
        raise ValueError(f"kind must be 'strong', 'weak' or None (from the runs' scaling metadata), not {kind!r}")
    if group is not None and group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS} or None, not {group!r}")
    value_col = "elapsed" if metric == "time" else metric
    if isinstance(data, xr.Dataset):
        table, keys = _from_dataset(data, metric, group, reduce or ("max" if metric == "time" else "sum"), by)
    else:
        if group is not None or metric != "time":
            raise ValueError("group= and metric= need a perfkit Dataset; pass the values as elapsed= instead")
        table, keys = _from_values(data, nprocs, elapsed, by)
    table = table.rename(columns={"value": value_col})
    if table.empty:
        raise ValueError("no runs with a finite value and process count to analyse")
    curve_keys = keys + ([group] if group else [])
    table, kind_source = _derive(table, value_col, curve_keys, base, kind, metric == "time")
    kinds = sorted(set(table["scaling"]))
    if metric == "time" and group is None:
        table = _throughput(table, value_col, system_size, system_unit)
    if normalise:
        table = _normalise(table, value_col, keys, group, metric)
    table.attrs.update(
        metric=metric,
        value_column=value_col,
        units=_units(data, metric),
        kind=kinds[0] if len(kinds) == 1 else "mixed",
        kind_source=kind_source,
        by=keys,
        group=group or "",
        normalised=bool(normalise),
        elapsed_source=", ".join(sorted(set(table["source"]))),
    )
    return _ordered(table, [*curve_keys, "run", "nprocs", *RUN_NUMBERS, value_col, "source", "scaling"])


def _ordered(table: pd.DataFrame, first: list[str]) -> pd.DataFrame:
    """Identifying columns first, in ``first`` order, then the derived ones."""
    lead = [c for c in dict.fromkeys(first) if c in table.columns]
    out = table[lead + [c for c in table.columns if c not in lead]].reset_index(drop=True)
    out.attrs = dict(table.attrs)
    return out


def best_configuration(table: pd.DataFrame, *, at: str = "nodes") -> pd.DataFrame:
    """The fastest row of a :func:`scaling` table at each value of ``at`` (e.g. node count)."""
    value_col = table.attrs.get("value_column", "elapsed")
    if at not in table.columns:
        raise ValueError(f"column {at!r} not in the table; have {list(table.columns)}")
    finite = table[np.isfinite(table[at].astype(float))]
    best = finite.loc[finite.groupby(at)[value_col].idxmin()].sort_values(at)
    best.attrs = dict(table.attrs)
    return best.reset_index(drop=True)


# --- building the runs table --------------------------------------------------------------


def _from_dataset(
    ds: xr.Dataset, metric: str, group: str | None, reduce: str, by: ByArg
) -> tuple[pd.DataFrame, list[str]]:
    """Per-run (and per-group) values from the profile cube, with run metadata columns."""
    if "profile" not in ds:
        raise ValueError("Dataset has no 'profile' variable")
    if metric not in ds["metric"].values:
        raise ValueError(f"metric {metric!r} not in the Dataset; have {list(map(str, ds['metric'].values))}")
    ds = with_loaded_coords(ds)
    keys = _by_names(by, ds)
    prof = ds["profile"].sel(metric=metric).drop_vars(["metric", "units"], errors="ignore")
    if group not in (None, "function"):
        prof = _group_totals(ds, metric, group)
    value = _over_ranks(prof.sum("function", min_count=1) if group is None else prof, reduce)
    present = ds["profile"].notnull().any(("function", "metric")).sum("rank")
    computed, present = evaluate(value.data, present.data)
    value = value.copy(data=computed)
    empty = np.asarray(present) == 0
    if empty.any():
        warnings.warn(f"runs {', '.join(np.array(_runs(ds))[empty])} hold no measured values (their profile is all "
                      "NaN): left out", PerfkitWarning, stacklevel=3)
    if group is None:
        frame = pd.DataFrame({"run": _runs(ds), "value": value.values, "source": f"{reduce} over ranks"})
        if metric == "time" and "elapsed" in ds.coords:
            known = np.isfinite(ds["elapsed"].values.astype(float)) & ~empty
            frame.loc[known, "value"] = ds["elapsed"].values[known]
            frame.loc[known, "source"] = SOURCE_ELAPSED
    else:
        keep = [c for c in value.coords if c not in value.dims]
        frame = value.drop_vars(keep, errors="ignore").to_dataframe(name="value").reset_index()
        frame["run"] = frame["run"].astype(str)
        frame["source"] = f"{reduce} over ranks"
    meta = _run_meta(ds, keys, present.astype(float))
    frame = frame.merge(meta, on="run", how="left")
    frame = frame[np.isfinite(frame["value"]) & np.isfinite(frame["nprocs"])]
    return frame, keys


def _group_totals(ds: xr.Dataset, metric: str, group: str) -> xr.DataArray:
    """Per-rank totals of ``metric`` per ``group`` label (run, rank, group), NaN where a group has no value.

    Lazy (dask) on a dask-backed cube, reduced one block of ranks at a time.
    """
    labels = ds[group].values
    sums = per_rank(ds, lambda block: group_sum(block[..., 0], labels)[1], [metric])
    return xr.DataArray(sums, dims=("run", "rank", group),
                        coords={"run": ds["run"].values, "rank": ds["rank"].values, group: np.unique(labels)})


def _over_ranks(da: xr.DataArray, reduce: str) -> xr.DataArray:
    """Combine ranks: 'max' (slowest rank), 'min', 'mean' or 'sum' (total), NaN if none."""
    if reduce not in ("max", "min", "mean", "sum"):
        raise ValueError(f"reduce must be max, min, mean or sum, not {reduce!r}")
    if reduce == "sum":
        return da.sum("rank", min_count=1)
    return getattr(da, reduce)("rank", skipna=True)


def _runs(ds: xr.Dataset) -> list[str]:
    return [str(r) for r in ds["run"].values]


def _run_meta(ds: xr.Dataset, keys: list[str], present: np.ndarray) -> pd.DataFrame:
    """Run labels, process counts (``present``, the ranks with values, when unknown), node/ppn/thread counts, ``by``."""
    meta = pd.DataFrame({"run": _runs(ds)})
    nprocs = ds["nprocs"].values.astype(float) if "nprocs" in ds.coords else np.full(len(meta), np.nan)
    meta["nprocs"] = np.where(np.isfinite(nprocs), nprocs, present)
    for name in RUN_NUMBERS:
        if name in ds.coords and name not in keys:
            meta[name] = ds[name].values.astype(float)
    for name in keys:
        meta[name] = ds[name].values
    if "scaling" in ds.coords and "scaling" not in keys:
        meta["scaling"] = ds["scaling"].values.astype(str)
    return meta


def _by_names(by: ByArg, ds: xr.Dataset) -> list[str]:
    """``by`` as a list of run-coordinate names, checked against the Dataset."""
    if by is None:
        return []
    if isinstance(by, Mapping):
        raise ValueError("with a Dataset, by= names run coordinates; assign_coords(name=('run', ...)) first")
    names = [by] if isinstance(by, str) else list(by)
    run_coords = [str(c) for c in ds.coords if ds[c].dims == ("run",)]
    missing = [n for n in names if n not in run_coords]
    if missing:
        raise ValueError(f"by={missing} are not run coordinates; have {run_coords}")
    return names


def _from_values(data: Any, nprocs: Any, elapsed: Any, by: ByArg) -> tuple[pd.DataFrame, list[str]]:
    """Runs table from a DataFrame with named columns, or from plain arrays."""
    if isinstance(data, pd.DataFrame):
        n_col = nprocs if isinstance(nprocs, str) else "nprocs"
        t_col = elapsed if isinstance(elapsed, str) else "elapsed"
        keys = [] if by is None else [by] if isinstance(by, str) else list(by)
        missing = [c for c in (n_col, t_col, *keys) if c not in data.columns]
        if missing:
            raise ValueError(f"columns {missing} not in the DataFrame; have {list(data.columns)}")
        extra = [c for c in data.columns if c in (*RUN_NUMBERS, "run", "scaling") and c not in keys]
        frame = data[[*keys, *extra]].copy()
        frame["nprocs"] = data[n_col].astype(float)
        frame["value"] = data[t_col].astype(float)
    else:
        n_values = data if data is not None else nprocs
        if n_values is None or elapsed is None:
            raise ValueError("give process counts and elapsed times (or a Dataset / DataFrame)")
        frame = pd.DataFrame({"nprocs": np.asarray(n_values, float), "value": np.asarray(elapsed, float)})
        keys = []
        if isinstance(by, Mapping):
            keys = list(by)
            for name, labels in by.items():
                frame[name] = list(labels)
        elif by is not None:
            raise ValueError("with arrays, by= maps a name to one label per run, e.g. by={'system': [...]}")
    if "run" not in frame.columns:
        frame["run"] = [f"run{i}" for i in range(len(frame))]
    frame["source"] = SOURCE_GIVEN
    ok = np.isfinite(frame["value"]) & np.isfinite(frame["nprocs"]) & (frame["nprocs"] > 0)
    return frame[ok], keys


def _units(data: Any, metric: str) -> str:
    if isinstance(data, xr.Dataset) and "units" in data.coords:
        return str(data["units"].sel(metric=metric).values)
    return "s" if metric == "time" else ""


# --- derived columns ----------------------------------------------------------------------


def _curves(table: pd.DataFrame, keys: list[str]) -> Iterator[tuple[Any, pd.DataFrame]]:
    """Iterate (key, sub-table) over the curves (all rows when there are no keys)."""
    if not keys:
        yield (), table
        return
    yield from table.groupby(keys, sort=False, dropna=False)


def curve_scaling(sub: pd.DataFrame, kind: str | None, what: str = "these runs") -> tuple[str, str]:
    """(``strong`` | ``weak``, where that came from) for one curve's runs.

    ``kind`` (an argument) wins when the runs state nothing; runs stating both kinds, or a
    ``kind`` contradicting them, are a ValueError naming the runs.
    """
    column = sub["scaling"] if "scaling" in sub.columns else pd.Series([""] * len(sub), index=sub.index)
    stated = sorted({str(v) for v in column if isinstance(v, str) and v})
    runs = sub["run"].astype(str).tolist() if "run" in sub.columns else []
    if len(stated) > 1:
        by_kind = {k: [r for r, v in zip(runs, column, strict=True) if v == k] for k in stated}
        raise ValueError(f"{what} mix strong and weak scaling runs {by_kind}: a series is one or the other; "
                         "select the runs of one kind, or pass by='scaling'")
    if kind is not None and stated and stated[0] != kind:
        raise ValueError(f"kind={kind!r} given, but the runs state scaling={stated[0]!r} ({runs}); "
                         "correct the run metadata (scaling=...) if it is wrong")
    if kind is not None:
        return kind, "argument"
    if stated:
        return stated[0], "run metadata"
    return "strong", "default (no run states its scaling)"


def _derive(
    table: pd.DataFrame, value_col: str, keys: list[str], base: float | str | None, kind: str | None, is_time: bool
) -> tuple[pd.DataFrame, str]:
    """Add base_nprocs/base_value, ``scaling`` and speedup/efficiency (time) or ratio (other metrics)."""
    parts, sources = [], set()
    for _, sub in _curves(table, keys):
        sub = sub.sort_values("nprocs", kind="stable").copy()
        curve_kind, source = curve_scaling(sub, kind, f"the runs of curve {_describe(sub, keys)}")
        sub["scaling"] = curve_kind
        sources.add(source)
        sub["base_nprocs"], sub["base_value"] = _base(table, sub, value_col, base, keys)
        ideal = sub["nprocs"] / sub["base_nprocs"]
        if is_time:
            ratio = sub["base_value"] / sub[value_col]
            sub["ideal_speedup"] = ideal
            sub["speedup"] = ratio if curve_kind == "strong" else ratio * ideal
            sub["efficiency"] = ratio / ideal if curve_kind == "strong" else ratio
        else:
            sub["ratio"] = sub[value_col] / sub["base_value"]
        parts.append(sub)
    return pd.concat(parts), ", ".join(sorted(sources))


def _base(
    table: pd.DataFrame, sub: pd.DataFrame, value_col: str, base: float | str | None, keys: list[str]
) -> tuple[float, float]:
    """Reference (process count, value) of one curve: smallest N, a given N or a given run."""
    if isinstance(base, str):
        ref = table[table["run"] == base]
        group_keys = [k for k in keys if k in GROUPS]
        for k in group_keys:
            ref = ref[ref[k] == sub[k].iloc[0]]
        if ref.empty:
            raise ValueError(f"base run {base!r} not found (or has no value for this group)")
        return float(ref["nprocs"].iloc[0]), float(ref[value_col].iloc[0])
    n_base = float(sub["nprocs"].min()) if base is None else float(base)
    at_base = sub.loc[sub["nprocs"] == n_base, value_col]
    if at_base.empty:
        raise ValueError(f"no run with nprocs={n_base:g} in curve {_describe(sub, keys)}")
    return n_base, float(at_base.mean())


def _describe(sub: pd.DataFrame, keys: list[str]) -> str:
    return ", ".join(f"{k}={sub[k].iloc[0]}" for k in keys) or "(all runs)"


def _throughput(table: pd.DataFrame, value_col: str, system_size: float | None, unit: str) -> pd.DataFrame:
    """jobs_per_hour / jobs_per_day: 3600 / elapsed and 86400 / elapsed per system."""
    concurrent = 1.0
    if system_size is not None:
        if unit not in table.columns:
            raise ValueError(f"system_unit={unit!r} needs a {unit!r} column (run metadata)")
        concurrent = np.floor(system_size / table[unit].astype(float))
    table["jobs_per_hour"] = concurrent * 3600.0 / table[value_col]
    table["jobs_per_day"] = concurrent * 86400.0 / table[value_col]
    return table


def _normalise(table: pd.DataFrame, value_col: str, keys: list[str], group: str | None, metric: str) -> pd.DataFrame:
    """normalised_speedup = slowest curve's base time / T(N), per group (the seed's remedy)."""
    if metric != "time":
        raise ValueError("normalise=True applies to time (speedups), not to other metrics")
    parts = []
    for _, sub in _curves(table, [group] if group else []):
        bases = sub.groupby(keys, dropna=False)["base_nprocs"].first() if keys else sub["base_nprocs"].iloc[:1]
        if bases.nunique() > 1:
            raise ValueError(f"curves have different base process counts {sorted(bases.unique())}; pass base=N")
        sub = sub.copy()
        sub["normalised_speedup"] = sub["base_value"].max() / sub[value_col]
        parts.append(sub)
    return pd.concat(parts)
