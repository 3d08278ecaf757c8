"""Performance models of elapsed time T(N) [s] versus process count N, fitted honestly.

Every time model here is linear in its coefficients over terms N**i * log2(N)**j:

* Amdahl: T(N) = T1 * ((1 - P) + P / N), i.e. a + b / N with P = b / (a + b), T1 = a + b;
* communication model: T(N) = a + b / N + c * log2(N) + d * N with a, b, c, d >= 0;
* performance-model normal form (PMNF): a constant plus one or two terms N**i * log2(N)**j,
  the hypothesis chosen by leave-one-out cross-validation over process counts.

Fits minimise relative residuals (T - model) / T with non-negative coefficients, and return a
frozen result (scikit-learn style: the fit is the object, no hidden state) carrying the
coefficients, their covariance, residuals and a :class:`FitQuality` whose ``warnings`` say when
the data cannot support a confident answer. Also: Gustafson's scaled speedup and the
Karp-Flatt experimentally determined serial fraction.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy import optimize, stats

from perfkit import text as fmt

Term = tuple[float, int]  #: (i, j): the term N**i * log2(N)**j

CONSTANT: Term = (0.0, 0)
AMDAHL_TERMS: tuple[Term, ...] = (CONSTANT, (-1.0, 0))
COMM_TERMS: tuple[Term, ...] = (CONSTANT, (-1.0, 0), (0.0, 1), (1.0, 0))
#: PMNF exponents of N (negative ones describe work divided among processes) and of log2(N).
PMNF_EXPONENTS = (-1.0, -0.5, 0.0, 0.25, 1 / 3, 0.5, 2 / 3, 0.75, 1.0, 1.25, 1.5, 2.0)
PMNF_LOG_EXPONENTS = (0, 1, 2)

MIN_R2 = 0.9  #: below this the model explains too little of the variation
MAX_LOO = 0.10  #: above this relative leave-one-out error, predictions are unreliable
FEW_POINTS = 4  #: fewer distinct process counts than this -> barely constrained
RISE_TOLERANCE = 0.05  #: relative rise in time between process counts that Amdahl cannot model
SIMPLER_WITHIN = 0.05  #: prefer fewer PMNF terms when their LOO error is within this factor
SLOWER_BY = 0.01  #: relative rise past the best N that counts as "gets slower"
SHORTLIST = 40  #: PMNF hypotheses per term count cross-validated (best fits on all points)
CI_METHODS = ("profile", "delta", "bootstrap")  #: fit_amdahl interval methods (docs/scaling.md)


# --- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FitQuality:
    """How far to trust a fit: R^2 on time, RMS relative residual, LOO relative error."""

    n_points: int
    n_distinct: int
    r2: float
    rel_rmse: float
    loo_rel_error: float
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no warning was raised."""
        return not self.warnings


@dataclass(frozen=True, eq=False)
class ModelFit:
    """A fitted time model T(N) = sum_k coef_k * N**i_k * log2(N)**j_k [s]."""

    name: str
    terms: tuple[Term, ...]
    coef: np.ndarray
    coef_cov: np.ndarray
    nprocs: np.ndarray
    elapsed: np.ndarray
    quality: FitQuality

    def predict(self, n: Any) -> np.ndarray:
        """Modelled elapsed time [s] at process counts ``n``."""
        return _design(np.asarray(n, dtype=float), self.terms) @ self.coef

    def interval(self, n: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper ``level`` confidence band of the modelled time [s] at ``n``."""
        x = _design(np.asarray(n, dtype=float), self.terms)
        se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", x, self.coef_cov, x), 0.0))
        z = _t_quantile(level, self.quality.n_points - int(np.count_nonzero(self.coef)))
        mean = x @ self.coef
        return mean - z * se, mean + z * se

    @property
    def residuals(self) -> np.ndarray:
        """Measured minus modelled time at the fitted points [s]."""
        return self.elapsed - self.predict(self.nprocs)

    def speedup(self, n: Any, base: float | None = None) -> np.ndarray:
        """Modelled speedup T(base) / T(n); ``base`` defaults to the smallest fitted N."""
        base = float(self.nprocs.min()) if base is None else base
        return self.predict([base])[0] / self.predict(n)

    @property
    def best_nprocs(self) -> float:
        """Process count of least modelled time within the fitted range (smallest N on ties)."""
        grid = _grid(self.nprocs.min(), self.nprocs.max())
        return float(grid[np.argmin(self.predict(grid))])

    @property
    def slower_past_best(self) -> bool:
        """True when modelled time at the largest fitted N exceeds the best by over ``SLOWER_BY``."""
        best, last = self.predict([self.best_nprocs, self.nprocs.max()])
        return bool(last > best * (1 + SLOWER_BY))

    def n_for_gain(self, min_gain: float) -> float:
        """Process count past which doubling N cuts time by less than ``min_gain``.

        The gain of a doubling is T(N) / T(2N) - 1 (0.1 = 10 % faster); returns the smallest
        N >= 1 where it drops below ``min_gain`` (inf if it never does).
        """
        if min_gain <= 0:
            raise ValueError("min_gain must be positive, e.g. 0.1 for 10 %")
        grid = np.geomspace(1.0, 2.0**40, 4001)
        shortfall = self.predict(grid) / self.predict(2 * grid) - 1 - min_gain
        below = np.flatnonzero(shortfall < 0)
        if below.size == 0:
            return float("inf")
        if below[0] == 0:
            return 1.0
        lo, hi = grid[below[0] - 1], grid[below[0]]
        return float(optimize.brentq(lambda x: self.predict([x])[0] / self.predict([2 * x])[0] - 1 - min_gain, lo, hi))

    @property
    def formula(self) -> str:
        """The fitted model as text, e.g. ``'12.1 + 88.4*N^-1'`` (time in s)."""
        parts = [f"{c:.4g}{_term_text(t)}" for c, t in zip(self.coef, self.terms, strict=True) if c != 0]
        return " + ".join(parts) or "0"


@dataclass(frozen=True, eq=False)
class AmdahlFit(ModelFit):
    """Amdahl's law fitted: parallel fraction ``p`` with its CI, serial time T(1) [s]."""

    p: float = float("nan")
    p_ci: tuple[float, float] = (float("nan"), float("nan"))
    serial_time: float = float("nan")
    ci_method: str = ""

    @property
    def asymptotic_speedup(self) -> float:
        """Speedup bound 1 / (1 - P) as N grows without limit."""
        return float("inf") if self.p >= 1 else 1.0 / (1.0 - self.p)


@dataclass(frozen=True, eq=False)
class PMNFFit(ModelFit):
    """Best performance-model normal form hypothesis; ``candidates`` ranks the others."""

    candidates: pd.DataFrame = field(default_factory=pd.DataFrame)


@dataclass(frozen=True, eq=False)
class GustafsonFit:
    """Gustafson's law fitted to weak-scaling runs: scaled speedup (1 - p) + p * N/N0."""

    p: float
    p_ci: tuple[float, float]
    nprocs: np.ndarray
    scaled_speedup: np.ndarray
    quality: FitQuality

    def predict(self, n: Any) -> np.ndarray:
        """Modelled scaled speedup at process counts ``n``."""
        return gustafson_speedup(np.asarray(n, float) / self.nprocs.min(), self.p)


# --- public fitting functions -----------------------------------------------------------


def fit_amdahl(
    nprocs: Any,
    elapsed: Any = None,
    *,
    level: float = 0.95,
    ci: str = "profile",
    n_boot: int = 2000,
    random_state: int = 0,
    scaling: str | None = None,
) -> AmdahlFit:
    """Fit Amdahl's law T(N) = T1 * ((1 - P) + P / N) to strong-scaling times [s].

    ``nprocs`` may be a Dataset or a :func:`perfkit.scaling` table instead of arrays. A series
    stated weak (``scaling="weak"``, or the runs' ``scaling`` metadata) is refused: Amdahl's law
    is about a fixed total problem; use :func:`fit_gustafson`.

    ``p_ci`` (``level``, e.g. 95 %) is by default the profile-likelihood interval: every P in
    [0, 1] whose best fit is not worse than the best fit by more than the F(1, n - 2) quantile
    of the relative residuals allows. It stays honest at the bounds (P = 0 or 1) and with few or
    uneven repetitions (docs/scaling.md compares it with the alternatives: ``ci="delta"`` for
    the fit-covariance (delta method) interval, ``ci="bootstrap"`` for a pairs bootstrap of
    ``n_boot`` resamples seeded by ``random_state``).
    """
    if ci not in CI_METHODS:
        raise ValueError(f"ci must be one of {CI_METHODS}, not {ci!r}")
    _require_scaling(nprocs, scaling, "strong", "fit_amdahl")
    n, t = _points(nprocs, elapsed)
    base = _fit_terms(n, t, AMDAHL_TERMS, "amdahl")
    a, b = base.coef
    p = b / (a + b)
    if ci == "profile":
        p_ci = _amdahl_profile_interval(n, t, level)
        method = f"profile likelihood (F(1, {len(n) - 2}) on relative residuals)"
    elif ci == "delta":
        grad = np.array([-b, a]) / (a + b) ** 2
        half = _t_quantile(level, len(n) - 2) * np.sqrt(max(grad @ base.coef_cov @ grad, 0.0))
        p_ci, method = (p - half, p + half), "fit covariance (delta method)"
    else:
        boot = _pairs_bootstrap(n, t, AMDAHL_TERMS, n_boot, random_state)
        p_boot = boot[:, 1] / boot.sum(axis=1)
        p_ci = tuple(float(q) for q in np.nanquantile(p_boot, [(1 - level) / 2, (1 + level) / 2]))
        method = f"pairs bootstrap ({len(boot)} resamples)"
    quality = _with_warnings(base.quality, _rises(n, t))
    return AmdahlFit(
        name="amdahl",
        terms=AMDAHL_TERMS,
        coef=base.coef,
        coef_cov=base.coef_cov,
        nprocs=n,
        elapsed=t,
        quality=quality,
        p=float(p),
        p_ci=(float(np.clip(p_ci[0], 0, 1)), float(np.clip(p_ci[1], 0, 1))),
        serial_time=float(a + b),
        ci_method=method,
    )


def _amdahl_profile_ssr(n: np.ndarray, t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Least relative sum of squares over T1 at each parallel fraction ``p`` (closed form).

    With x_i = ((1 - P) + P / N_i) / T_i, min over T1 of sum (T1 x_i - 1)^2 = n - (sum x)^2 / sum x^2.
    """
    u, v = 1 / t, 1 / (n * t)
    suu, suv, svv, su, sv = u @ u, u @ v, v @ v, u.sum(), v.sum()
    q = 1 - p
    sx = q * su + p * sv
    sxx = q * q * suu + 2 * p * q * suv + p * p * svv
    return np.maximum(len(t) - sx * sx / sxx, 0.0)


def _amdahl_profile_interval(n: np.ndarray, t: np.ndarray, level: float) -> tuple[float, float]:
    """P in [0, 1] with (SSR(P) - SSR_min) / (SSR_min / (n - 2)) <= F(1, n - 2) quantile ``level``."""
    grid = np.linspace(0.0, 1.0, 4001)
    ssr = _amdahl_profile_ssr(n, t, grid)
    k = int(np.argmin(ssr))
    dof = len(t) - 2
    best = float(ssr[k])
    if best <= 0 or dof <= 0:
        return (float(grid[k]), float(grid[k])) if best <= 0 else (0.0, 1.0)
    limit = best * (1 + stats.f.ppf(level, 1, dof) / dof)

    def excess(x: float) -> float:
        return float(_amdahl_profile_ssr(n, t, np.array([x]))[0]) - limit

    inside = np.flatnonzero(ssr <= limit)
    lo_i, hi_i = inside.min(), inside.max()
    lo = 0.0 if lo_i == 0 else optimize.brentq(excess, grid[lo_i - 1], grid[lo_i])
    hi = 1.0 if hi_i == grid.size - 1 else optimize.brentq(excess, grid[hi_i], grid[hi_i + 1])
    return float(lo), float(hi)


def fit_comm_model(nprocs: Any, elapsed: Any = None) -> ModelFit:
    """Fit T(N) = a + b/N + c*log2(N) + d*N [s], a..d >= 0 (serial, parallel, tree, linear)."""
    n, t = _points(nprocs, elapsed)
    fit = _fit_terms(n, t, COMM_TERMS, "comm")
    return replace(fit, quality=_with_warnings(fit.quality, _rise_past_best(fit)))


def fit_pmnf(
    nprocs: Any,
    elapsed: Any = None,
    *,
    exponents: tuple[float, ...] = PMNF_EXPONENTS,
    log_exponents: tuple[int, ...] = PMNF_LOG_EXPONENTS,
    max_terms: int = 2,
) -> PMNFFit:
    """Search T(N) = c0 + sum of up to ``max_terms`` terms c * N**i * log2(N)**j [s].

    The ``SHORTLIST`` hypotheses of each size that fit all points best are ranked by
    leave-one-out relative error over process counts; among those
    within ``SIMPLER_WITHIN`` of the best, the one with fewest terms wins. The result's
    ``best_nprocs`` / ``slower_past_best`` say whether the code gets slower past some N.
    """
    n, t = _points(nprocs, elapsed)
    distinct = len(np.unique(n))
    pool = [(float(i), int(j)) for i in exponents for j in log_exponents if (i, j) != (0, 0)]
    k_max = min(max_terms, distinct - 2)
    columns = _design(n, (CONSTANT, *pool)) / t[:, None]
    rows = []
    for k in range(1, k_max + 1):
        for combo in _shortlist(columns, k):
            terms = (CONSTANT, *(pool[c - 1] for c in combo))
            rows.append((terms, k, _loo_relative(columns[:, [0, *combo]], n)))
    table = pd.DataFrame(rows, columns=["terms", "n_terms", "loo_rel_error"]).sort_values(
        ["loo_rel_error", "n_terms"], kind="stable"
    )
    best_loo = table["loo_rel_error"].iloc[0]
    near = table[table["loo_rel_error"] <= best_loo * (1 + SIMPLER_WITHIN) + 1e-12]
    chosen = near.sort_values(["n_terms", "loo_rel_error"], kind="stable").iloc[0]["terms"]
    fit = _fit_terms(n, t, chosen, "pmnf")
    fit = replace(fit, quality=_with_warnings(fit.quality, _rise_past_best(fit)))
    table["formula"] = [_formula_of(terms) for terms in table["terms"]]
    return PMNFFit(**{**_fields(fit), "candidates": table.head(10).reset_index(drop=True)})


def gustafson_speedup(nprocs: Any, p: float) -> np.ndarray:
    """Gustafson's scaled speedup (1 - p) + p * N for parallel fraction ``p``."""
    return (1.0 - p) + p * np.asarray(nprocs, dtype=float)


def fit_gustafson(nprocs: Any, elapsed: Any = None, *, level: float = 0.95, scaling: str | None = None) -> GustafsonFit:
    """Fit Gustafson's law to weak-scaling times [s] (work per process constant).

    The scaled speedup at N is (N / N0) * T(N0) / T(N), N0 the smallest process count. A series
    stated strong (``scaling="strong"`` or run metadata) is refused: use :func:`fit_amdahl`.
    """
    _require_scaling(nprocs, scaling, "weak", "fit_gustafson")
    n, t = _points(nprocs, elapsed)
    ratio = n / n.min()
    t0 = t[n == n.min()].mean()
    s = ratio * t0 / t
    x, y = ratio - 1, s - 1
    p = float(x @ y / (x @ x))
    dof = len(n) - 1
    sigma2 = np.sum((y - p * x) ** 2) / dof
    half = _t_quantile(level, dof) * np.sqrt(sigma2 / (x @ x))
    pred = gustafson_speedup(ratio, p)
    quality = _quality(s, pred, len(np.unique(n)), loo=float("nan"))
    return GustafsonFit(p=p, p_ci=(float(p - half), float(p + half)), nprocs=n, scaled_speedup=s, quality=quality)


def karp_flatt(nprocs: Any, elapsed: Any = None, *, scaling: str | None = None) -> pd.DataFrame:
    """Experimentally determined serial fraction e(N) = (1/S - 1/p) / (1 - 1/p) of a strong-scaling series.

    p = N / N0 and S = T(N0) / T(N) relative to the smallest process count N0 (repeated runs
    averaged). On exact Amdahl data e is constant = 1 - P; a rising e means overhead growing
    with N. ``attrs["slope_per_doubling"]`` is the least-squares change of e per doubling.
    A series stated weak (``scaling="weak"`` or run metadata) is refused: S is then no speedup.
    """
    _require_scaling(nprocs, scaling, "strong", "karp_flatt")
    n, t = _points(nprocs, elapsed, minimum=2)
    frame = pd.DataFrame({"nprocs": n, "elapsed": t}).groupby("nprocs", as_index=False)["elapsed"].mean()
    p = frame["nprocs"] / frame["nprocs"].iloc[0]
    frame["speedup"] = frame["elapsed"].iloc[0] / frame["elapsed"]
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["serial_fraction"] = (1 / frame["speedup"] - 1 / p) / (1 - 1 / p)
    rest = frame.iloc[1:]
    slope = np.polyfit(np.log2(rest["nprocs"]), rest["serial_fraction"], 1)[0] if len(rest) > 1 else np.nan
    frame.attrs["slope_per_doubling"] = float(slope)
    return frame


# --- fitting machinery --------------------------------------------------------------------


def series_scaling(data: Any, scaling: str | None = None) -> tuple[str, str]:
    """(``strong`` | ``weak`` | "" when unknown, where it came from) of a series.

    From the ``scaling`` argument, else a Dataset's ``scaling`` run coordinate, a scaling
    table's stated kind (``attrs["kind_source"]`` not the default) or its ``scaling`` column.
    """
    from perfkit.analysis.scaling import curve_scaling

    if scaling not in (None, "strong", "weak"):
        raise ValueError(f"scaling must be 'strong', 'weak' or None, not {scaling!r}")
    if isinstance(data, xr.Dataset):
        stated = data["scaling"].values.astype(str) if "scaling" in data.coords else [""] * data.sizes["run"]
        frame = pd.DataFrame({"run": [str(r) for r in data["run"].values], "scaling": stated})
    elif isinstance(data, pd.DataFrame):
        frame = data
        if "scaling" not in data.columns and data.attrs.get("kind_source") in ("argument", "run metadata"):
            frame = pd.DataFrame({"scaling": [data.attrs["kind"]]})
    else:
        frame = pd.DataFrame({"scaling": [""]})
    kind, source = curve_scaling(frame, scaling, "the series' runs")
    return ("", source) if source.startswith("default") else (kind, source)


def _require_scaling(data: Any, scaling: str | None, needed: str, who: str) -> None:
    """ValueError when the series is stated to be of the other scaling kind than ``needed``."""
    kind, source = series_scaling(data, scaling)
    if kind and kind != needed:
        law = ("Amdahl's law and the Karp-Flatt metric assume a fixed total problem (strong scaling); "
               "for a weak series fit Gustafson's law: perfkit.fit_gustafson") if needed == "strong" else (
               "Gustafson's law assumes a fixed work per process (weak scaling); "
               "for a strong series fit Amdahl's law: perfkit.fit_amdahl")
        raise ValueError(f"{who}: this is a {kind}-scaling series ({source}). {law}")


def _points(nprocs: Any, elapsed: Any, minimum: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(N, T) as float arrays from arrays, a scaling table or a Dataset; check enough points."""
    if isinstance(nprocs, xr.Dataset):
        from perfkit.analysis.scaling import scaling

        nprocs = scaling(nprocs)
    if isinstance(nprocs, pd.DataFrame):
        table = nprocs
        nprocs, elapsed = table["nprocs"], table[elapsed or table.attrs.get("value_column", "elapsed")]
    if elapsed is None:
        raise ValueError("give elapsed times [s] with the process counts")
    n, t = np.asarray(nprocs, dtype=float).ravel(), np.asarray(elapsed, dtype=float).ravel()
    if n.shape != t.shape:
        raise ValueError(f"{n.size} process counts but {t.size} times")
    keep = np.isfinite(n) & np.isfinite(t) & (n > 0) & (t > 0)
    n, t = n[keep], t[keep]
    distinct = len(np.unique(n))
    if distinct < minimum:
        raise ValueError(f"need runs at >= {minimum} distinct process counts to fit, got {distinct}")
    return n, t


def _design(n: np.ndarray, terms: tuple[Term, ...]) -> np.ndarray:
    """Columns N**i * log2(N)**j, one per term."""
    n = np.atleast_1d(n)
    return np.column_stack([n**i * np.log2(n) ** j for i, j in terms])


def _solve(n: np.ndarray, t: np.ndarray, terms: tuple[Term, ...]) -> np.ndarray:
    """Non-negative coefficients minimising the relative residuals (T - model) / T."""
    return _nnls_relative(_design(n, terms) / t[:, None])


def _nnls_relative(xw: np.ndarray) -> np.ndarray:
    """Non-negative c minimising |xw @ c - 1| (rows of the design divided by their time)."""
    scale = np.maximum(np.abs(xw).max(axis=0), 1e-300)
    coef, _ = optimize.nnls(xw / scale, np.ones(xw.shape[0]))
    return coef / scale


def _fit_terms(n: np.ndarray, t: np.ndarray, terms: tuple[Term, ...], name: str) -> ModelFit:
    """Fit one set of terms; covariance on the active (non-zero) coefficients."""
    distinct = len(np.unique(n))
    if distinct < len(terms):
        raise ValueError(f"the {name} model has {len(terms)} coefficients: need >= {len(terms)} process counts")
    coef = _solve(n, t, terms)
    pred = _design(n, terms) @ coef
    loo = _loo(n, t, terms) if distinct > len(terms) else float("nan")
    quality = _quality(t, pred, distinct, loo)
    return ModelFit(
        name=name, terms=terms, coef=coef, coef_cov=_covariance(n, t, terms, coef), nprocs=n, elapsed=t, quality=quality
    )


def _covariance(n: np.ndarray, t: np.ndarray, terms: tuple[Term, ...], coef: np.ndarray) -> np.ndarray:
    """sigma^2 (X' W X)^-1 over active coefficients, W = 1/T^2; NaN without residual dof."""
    x = _design(n, terms) / t[:, None]
    active = coef > 0
    cov = np.zeros((len(terms), len(terms)))
    dof = len(t) - int(active.sum())
    if not active.any():
        return cov
    if dof <= 0:
        cov[np.ix_(active, active)] = np.nan
        return cov
    sigma2 = np.sum((1 - x @ coef) ** 2) / dof
    xa = x[:, active]
    cov[np.ix_(active, active)] = sigma2 * np.linalg.pinv(xa.T @ xa)
    return cov


def _loo(n: np.ndarray, t: np.ndarray, terms: tuple[Term, ...]) -> float:
    """Mean relative error predicting each process count from fits leaving it out."""
    return _loo_relative(_design(n, terms) / t[:, None], n)


def _shortlist(columns: np.ndarray, k: int) -> list[tuple[int, ...]]:
    """The SHORTLIST combinations of k term columns (after the constant) that fit all points best."""
    combos = list(itertools.combinations(range(1, columns.shape[1]), k))
    misfit = [np.sum((columns[:, [0, *c]] @ _nnls_relative(columns[:, [0, *c]]) - 1) ** 2) for c in combos]
    return [combos[i] for i in np.argsort(misfit, kind="stable")[:SHORTLIST]]


def _loo_relative(xw: np.ndarray, n: np.ndarray) -> float:
    """Leave-one-process-count-out mean |prediction / T - 1| on a time-divided design."""
    errors = []
    for value in np.unique(n):
        out = n == value
        errors.extend(np.abs(xw[out] @ _nnls_relative(xw[~out]) - 1))
    return float(np.mean(errors))


def _pairs_bootstrap(n: np.ndarray, t: np.ndarray, terms: tuple[Term, ...], n_boot: int, seed: int) -> np.ndarray:
    """Coefficients refitted on (N, T) pairs drawn with replacement (resamples with fewer
    distinct process counts than coefficients are skipped)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(n), len(n))
        if len(np.unique(n[idx])) >= len(terms):
            out.append(_solve(n[idx], t[idx], terms))
    return np.array(out).reshape(-1, len(terms))


def _quality(y: np.ndarray, pred: np.ndarray, n_distinct: int, loo: float) -> FitQuality:
    """R^2, RMS relative residual, LOO error and the warnings they call for."""
    ss_tot = np.sum((y - y.mean()) ** 2)
    r2 = float(1 - np.sum((y - pred) ** 2) / ss_tot) if ss_tot > 0 else float("nan")
    rel_rmse = float(np.sqrt(np.mean(((y - pred) / y) ** 2)))
    warnings = []
    if n_distinct < FEW_POINTS:
        warnings.append(f"only {n_distinct} distinct process counts: the fit is barely constrained")
    if np.isfinite(r2) and r2 < MIN_R2:
        warnings.append(f"R^2 = {r2:.2f} < {MIN_R2}: the model explains little of the variation")
    if np.isfinite(loo) and loo > MAX_LOO:
        warnings.append(f"leave-one-out relative error {loo:.0%} > {MAX_LOO:.0%}: predictions are unreliable")
    return FitQuality(
        n_points=len(y), n_distinct=n_distinct, r2=r2, rel_rmse=rel_rmse, loo_rel_error=loo, warnings=tuple(warnings)
    )


def _with_warnings(quality: FitQuality, extra: list[str]) -> FitQuality:
    return FitQuality(**{**quality.__dict__, "warnings": quality.warnings + tuple(extra)})


def _rises(n: np.ndarray, t: np.ndarray) -> list[str]:
    """Warnings where mean time rises with N by more than RISE_TOLERANCE (Amdahl can't)."""
    means = pd.Series(t).groupby(n).mean()
    rising = [
        f"{fmt.number(a)}->{fmt.number(b)}" for (a, ta), (b, tb) in itertools.pairwise(means.items())
        if tb > ta * (1 + RISE_TOLERANCE)
    ]
    if not rising:
        return []
    return [f"time rises with N ({', '.join(rising)}): Amdahl cannot describe this; try fit_comm_model or fit_pmnf"]


def _rise_past_best(fit: ModelFit) -> list[str]:
    """A warning when measured mean time rises past its fastest N by over ``SLOWER_BY``.

    Says whether the model follows the rise (its ``best_nprocs`` before the largest N and
    ``slower_past_best``) or smooths it away (then ``best_nprocs`` is not the optimum).
    """
    means = pd.Series(fit.elapsed).groupby(fit.nprocs).mean()
    best = float(means.idxmin())
    later = means[(means.index > best) & (means > means.min() * (1 + SLOWER_BY))]
    if later.empty:
        return []
    worst = float(later.idxmax())
    text = (f"measured time rises past N={fmt.number(best)} ({fmt.seconds(means.min())}, up to "
            f"{fmt.seconds(later.max())} at N={fmt.number(worst)}, {fmt.percent(later.max() / means.min() - 1, True)})")
    if fit.slower_past_best:
        return [f"{text}; the model follows it (best N = {fmt.number(fit.best_nprocs)})"]
    return [f"{text} but the {fit.name} model does not follow it (its best N = {fmt.number(fit.best_nprocs)}): "
            f"best_nprocs is not the optimum here; the measurements say N={fmt.number(best)}"]


def _t_quantile(level: float, dof: int) -> float:
    """Two-sided Student t quantile (NaN without degrees of freedom)."""
    return float(stats.t.ppf((1 + level) / 2, dof)) if dof > 0 else float("nan")


def _grid(lo: float, hi: float) -> np.ndarray:
    return np.geomspace(lo, hi, 2001) if hi > lo else np.array([lo])


def _fields(fit: ModelFit) -> dict[str, Any]:
    return {name: getattr(fit, name) for name in ModelFit.__dataclass_fields__}


def _term_text(term: Term) -> str:
    i, j = term
    parts = []
    if i != 0:
        parts.append("N" if i == 1 else f"N^{Fraction(i).limit_denominator(12)}")
    if j:
        parts.append("log2(N)" if j == 1 else f"log2(N)^{j}")
    return "".join("*" + p for p in parts)


def _formula_of(terms: tuple[Term, ...]) -> str:
    return " + ".join(f"c{k}{_term_text(t)}" for k, t in enumerate(terms))
