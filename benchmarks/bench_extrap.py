"""perfkit's scaling models side by side with Extra-P: leave-one-out error and time to fit.

Data: the HPCCG strong-scaling runs in ``data/scaling/hpccg_strong.csv`` (wall time under mpiP
and under IPM, 1-16 ranks) and a synthetic Amdahl + communication series with 2 % noise and
3 repetitions per process count. For each model, every distinct process count is left out in
turn, the model is fitted on the others and predicts the one left out; the table reports the
mean and largest relative error of those predictions, and the median time of a fit on all
points.

Extra-P is not a perfkit dependency, and its pins (numpy 1.x, PySide6) clash with the project
environment, so its models run in a separate interpreter that has ``extrap`` installed::

    python -m venv /tmp/extrap-venv && /tmp/extrap-venv/bin/pip install extrap
    .venv/bin/python benchmarks/bench_extrap.py --extrap-python /tmp/extrap-venv/bin/python

Writes ``benchmarks/results/extrap.json`` and ``benchmarks/results/extrap.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TIMING_REPEATS = 5
#: name -> (Extra-P modeler, allow negative exponents, model N*T (core-seconds) then divide by N)
EXTRAP_VARIANTS = {
    "Extra-P Basic": ("Basic", False, False),
    "Extra-P Basic, negative exponents": ("Basic", True, False),
    "Extra-P Basic on N*T (strong-scaling conversion)": ("Basic", False, True),
    "Extra-P Refining": ("Refining", False, False),
}


def datasets() -> dict[str, dict[str, list[float]]]:
    """Process counts and times [s] of each benchmark series."""
    import pandas as pd

    table = pd.read_csv(ROOT / "data" / "scaling" / "hpccg_strong.csv")
    out = {}
    for tool in ("IPM", "mpiP"):
        rows = table[table["tool"] == tool]
        out[f"HPCCG strong, {tool} wall time"] = {"n": rows["nprocs"].tolist(), "t": rows["wall_s"].tolist()}
    n = np.repeat(2.0 ** np.arange(11), 3)
    truth = 1000 * (0.02 + 0.98 / n) + 0.5 * np.log2(n) + 0.002 * n
    noisy = truth * (1 + 0.02 * np.random.default_rng(42).standard_normal(n.size))
    out["synthetic Amdahl+comm, 2% noise, 3 reps"] = {"n": n.tolist(), "t": noisy.tolist()}
    return out


def loo(n: np.ndarray, t: np.ndarray, fit_predict: Callable) -> list[float]:
    """Relative errors predicting each left-out process count (all its repetitions)."""
    errors = []
    for value in np.unique(n):
        out = n == value
        pred = fit_predict(n[~out], t[~out], n[out])
        errors.extend(np.abs(np.asarray(pred) - t[out]) / t[out])
    return [float(e) for e in errors]


def fit_time(fit: Callable, n: np.ndarray, t: np.ndarray) -> float:
    """Median wall time [s] of fitting on all points."""
    times = []
    for _ in range(TIMING_REPEATS):
        start = time.perf_counter()
        fit(n, t)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --- perfkit ------------------------------------------------------------------------------


def perfkit_results(series: dict) -> list[dict]:
    from perfkit.analysis import models

    fitters = {
        "perfkit Amdahl": models.fit_amdahl,
        "perfkit comm model": models.fit_comm_model,
        "perfkit PMNF search": models.fit_pmnf,
    }
    rows = []
    for data_name, data in series.items():
        n, t = np.asarray(data["n"], float), np.asarray(data["t"], float)
        for name, fitter in fitters.items():

            def fit(n_, t_, fitter=fitter):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return fitter(n_, t_, n_boot=200) if fitter is models.fit_amdahl else fitter(n_, t_)

            errors = loo(n, t, lambda a, b, c, fit=fit: fit(a, b).predict(c))
            full = fit(n, t)
            rows.append(_row(data_name, name, errors, fit_time(fit, n, t), full.formula, full.quality.warnings))
    return rows


def _row(data: str, model: str, errors: list[float], seconds: float, formula: str, notes=()) -> dict:
    return {
        "data": data,
        "model": model,
        "loo_mean_rel_error": float(np.mean(errors)),
        "loo_max_rel_error": float(np.max(errors)),
        "fit_seconds": seconds,
        "formula": formula,
        "notes": list(notes),
    }


# --- Extra-P (runs in the interpreter that has it) ----------------------------------------


def extrap_worker(series: dict) -> list[dict]:
    """Fit every series with each Extra-P variant; called inside the Extra-P interpreter."""
    import extrap

    rows = []
    for data_name, data in series.items():
        n, t = np.asarray(data["n"], float), np.asarray(data["t"], float)
        for name, (modeler, negative, core_seconds) in EXTRAP_VARIANTS.items():

            def fit(n_, t_, modeler=modeler, negative=negative, core_seconds=core_seconds):
                if not core_seconds:
                    return _extrap_fit(n_, t_, modeler, negative)
                predict, formula = _extrap_fit(n_, t_ * n_, modeler, negative)
                return (lambda x, predict=predict: predict(x) / np.asarray(x, float)), f"({formula}) / p"

            errors = loo(n, t, lambda a, b, c, fit=fit: fit(a, b)[0](c))
            _, formula = fit(n, t)
            rows.append(_row(data_name, name, errors, fit_time(fit, n, t), formula, [f"extrap {extrap.__version__}"]))
    return rows


def _extrap_fit(n: np.ndarray, t: np.ndarray, modeler: str, negative: bool):
    """Fit with Extra-P from its text input format; return (predict, formula)."""
    from extrap.fileio.file_reader.text_file_reader import TextFileReader
    from extrap.modelers.model_generator import ModelGenerator

    points = np.unique(n)
    lines = ["PARAMETER p", "POINTS " + " ".join(f"{p:g}" for p in points), "REGION main", "METRIC time"]
    lines += ["DATA " + " ".join(f"{v!r}" for v in t[n == p]) for p in points]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(lines) + "\n")
    try:
        experiment = TextFileReader().read_experiment(handle.name)
    finally:
        Path(handle.name).unlink()
    generator = ModelGenerator(experiment, modeler=modeler)
    if negative:
        generator.modeler.allow_negative_exponents = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generator.model_all()
    (model,) = generator.models.values()
    function = model.hypothesis.function
    formula = function.to_string(*experiment.parameters)
    return (lambda x: np.atleast_1d(function.evaluate(np.asarray(x, float)))), formula


def run_extrap(series: dict, python: str) -> tuple[list[dict], str]:
    """Run :func:`extrap_worker` in ``python``; return its rows, or none and the reason."""
    proc = subprocess.run(
        [python, __file__, "--worker"], input=json.dumps(series), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return [], proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "Extra-P run failed"
    return json.loads(proc.stdout), ""


# --- report -------------------------------------------------------------------------------


def markdown(rows: list[dict], extrap_note: str) -> str:
    lines = [
        "# perfkit scaling models vs Extra-P",
        "",
        "Leave-one-out over process counts (each distinct N left out in turn, predicted from the others);",
        "relative error |predicted - measured| / measured; fit time = median of "
        f"{TIMING_REPEATS} fits on all points. Generated by `benchmarks/bench_extrap.py`.",
        "",
    ]
    if extrap_note:
        lines += [f"Extra-P could not be run: {extrap_note}", ""]
    for data in dict.fromkeys(r["data"] for r in rows):
        lines += [
            f"## {data}",
            "",
            "| model | LOO mean rel. error | LOO max rel. error | fit time [ms] | model on all points |",
            "|---|---:|---:|---:|---|",
        ]
        for r in (r for r in rows if r["data"] == data):
            lines.append(
                f"| {r['model']} | {r['loo_mean_rel_error']:.1%} | {r['loo_max_rel_error']:.1%} | "
                f"{1000 * r['fit_seconds']:.1f} | `{r['formula']}` |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extrap-python", default=sys.executable, help="interpreter that has extrap installed")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        json.dump(extrap_worker(json.load(sys.stdin)), sys.stdout)
        return
    sys.path.insert(0, str(ROOT))
    series = datasets()
    rows = perfkit_results(series)
    extrap_rows, note = run_extrap(series, args.extrap_python)
    rows += extrap_rows
    rows.sort(key=lambda r: list(series).index(r["data"]))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "extrap.json").write_text(json.dumps({"series": series, "results": rows}, indent=1) + "\n")
    (RESULTS / "extrap.md").write_text(markdown(rows, note))
    print(markdown(rows, note))


if __name__ == "__main__":
    main()
