"""Axis tickers and labels that read well: labelled log ticks that never overlap, integer ticks for ranks,
SI labels with the unit (``20 MB``, not ``2.000e+7``) and times in a unit that fits (``500 ms``, ``1.5 s``).

Bokeh's own log ticker falls back to linear ticks below two decades (``1000 1500 2000`` crowded
at the right end, no label under the first step) and labels only powers of ten above. Here a log
axis gets fixed ticks: the values given (process counts), or 1-2-5 steps, thinned so that
neighbouring labels are at least a fixed fraction of the axis apart, with unlabelled minor ticks
at 1-9 x 10^k.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from bokeh.models import (
    AdaptiveTicker,
    BasicTicker,
    CompositeTicker,
    CustomJSTickFormatter,
    FixedTicker,
    PrintfTickFormatter,
)

#: Smallest gap between labelled log ticks, as a fraction of the axis span in decades.
MIN_GAP = 0.09
#: Smallest ratio between neighbouring labelled ticks of given values (process counts).
MIN_RATIO = 1.4
#: Labels of log ticks: plain numbers (48, 1536, 0.02), no powers of ten.
LOG_FORMAT = "%g"
#: Tick label with an SI prefix (k, M, G, T, P) from 1000 up, three significant digits.
SI_JS = """
const prefixes = ["", " k", " M", " G", " T", " P"];
let value = tick, i = 0;
while (Math.abs(value) >= 1000 && i < prefixes.length - 1) { value /= 1000; i += 1; }
return Number(value.toPrecision(3)).toString() + prefixes[i];
"""


#: Units written with an SI prefix on a log axis (:func:`log_unit_formatter`).
PREFIXED = ("B", "s", "B/s", "bit/s")
#: Tick labels of a log axis in a unit (``UNIT``): each tick its own SI prefix, from nano to peta, three digits.
LOG_JS = """
const a = Math.abs(tick);
if (a === 0) return "0";
const prefixes = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""], [1e-3, "m"], [1e-6, "µ"],
                  [1e-9, "n"]];
const [scale, prefix] = prefixes.find(([s]) => a >= s * (1 - 1e-9)) || [1e-9, "n"];
return Number((tick / scale).toPrecision(3)).toString() + " " + prefix + "UNIT";
"""
#: Tick labels of a quantity with a unit: one SI prefix for the whole axis, chosen by its largest tick (``UNIT``
#: is replaced by the unit), three significant digits.
UNIT_JS = """
const top = Math.max(...ticks.map(Math.abs));
const prefixes = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""]];
const [scale, prefix] = prefixes.find(([s]) => top >= s) || [1, ""];
const value = Number((tick / scale).toPrecision(3));
return value.toString() + " " + prefix + "UNIT";
"""
#: Tick labels of a time in seconds: one unit for the whole axis (µs, ms, s, min, h) chosen by its largest tick.
TIME_JS = """
const top = Math.max(...ticks.map(Math.abs));
const units = [[7200, 3600, "h"], [120, 60, "min"], [1, 1, "s"], [1e-3, 1e-3, "ms"], [0, 1e-6, "µs"]];
const [, scale, unit] = units.find(([at]) => top >= at) || units[2];
return tick === 0 ? "0" : Number((tick / scale).toPrecision(3)).toString() + " " + unit;
"""


def unit_formatter(unit: str) -> CustomJSTickFormatter:
    """Tick labels for values in ``unit``: seconds as ``ms``/``s``/``min``, bytes and others with an SI prefix
    (``20 MB``); a count without a unit (``""`` or ``"1"``) as ``20 M`` (:func:`si_formatter`)."""
    if unit in ("", "1"):
        return si_formatter()
    if unit == "s":
        return CustomJSTickFormatter(code=TIME_JS)
    return CustomJSTickFormatter(code=UNIT_JS.replace("UNIT", unit.replace('"', "")))


def unit_ticker(unit: str) -> CompositeTicker | BasicTicker:
    """Ticks for values in ``unit`` at round numbers of the unit :func:`unit_formatter` writes them in: for
    seconds :func:`time_ticker`, bokeh's own 1-2-5 steps for the others (a plot whose unit changes gets its
    ticker back)."""
    return time_ticker() if unit == "s" else BasicTicker()


def time_ticker() -> CompositeTicker:
    """Ticks of a time axis [s] at round numbers of the unit ``TIME_JS`` labels them in: 1-2-5 steps of µs, ms and
    s up to 20 s apart, then 0.5, 1, 2, 5, 10, 15, 30 min (not 20 s steps that read ``0.333 min``), then hours."""
    return CompositeTicker(tickers=[
        AdaptiveTicker(mantissas=[1, 2, 5], base=10, min_interval=0.0, max_interval=20.0),
        AdaptiveTicker(mantissas=[0.5, 1, 2, 5, 10, 15, 30], base=60, min_interval=30.0, max_interval=1800.0),
        AdaptiveTicker(mantissas=[1, 2, 5, 10], base=3600, min_interval=3600.0),
    ])


def _positive(values: Iterable[float]) -> np.ndarray:
    array = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float).ravel()
    return np.unique(array[np.isfinite(array) & (array > 0)])


def _thin(candidates: np.ndarray, min_gap: float, *, keep_last: bool = False) -> list[float]:
    """Candidates (sorted) kept from the smallest up when at least ``min_gap`` decades past the last kept
    (``keep_last``: the largest is kept too, in place of kept ones too close to it)."""
    kept: list[float] = []
    for value, log in zip(candidates, np.log10(candidates)):
        if not kept or log - np.log10(kept[-1]) >= min_gap - 1e-9:
            kept.append(float(value))
    last = float(candidates[-1])
    if keep_last and kept[-1] != last:
        kept = [k for k in kept if np.log10(last / k) >= min_gap - 1e-9] + [last]
    return kept


def log_ticker(values: Iterable[float], *, at_values: bool = False) -> FixedTicker:
    """Fixed ticks for a log axis over the range of ``values`` (non-positive and NaN ignored).

    ``at_values`` labels the values themselves (e.g. the process counts measured), else 1-2-5
    steps; minor ticks at 1-9 x 10^k over a decade beyond the range each side (for zooming out).
    """
    data = _positive(values)
    if data.size == 0:
        return FixedTicker(ticks=[])
    lo, hi = np.floor(np.log10(data.min())) - 1, np.ceil(np.log10(data.max())) + 1
    decades = np.arange(lo, hi + 1)
    span = max(np.log10(data.max() / data.min()), 1.0)
    if at_values:
        majors = _thin(data, max(np.log10(MIN_RATIO), MIN_GAP * span), keep_last=True)
    else:
        mantissas = (1, 2, 5) if span <= 3 else (1, 3) if span <= 5 else (1,)
        steps = np.sort([float(f"{m}e{int(d)}") for d in decades for m in mantissas])
        majors = _thin(steps, MIN_GAP * span)
    minors = [float(f"{m}e{int(d)}") for d in decades for m in range(1, 10)]
    return FixedTicker(ticks=majors, minor_ticks=minors)


def log_formatter() -> PrintfTickFormatter:
    """Plain-number labels for log axes."""
    return PrintfTickFormatter(format=LOG_FORMAT)


def si_formatter() -> CustomJSTickFormatter:
    """Labels with SI prefixes from 1000 up (``500 k``, ``20 M``), plain numbers below (bytes, counts)."""
    return CustomJSTickFormatter(code=SI_JS)


def log_unit_formatter(unit: str) -> CustomJSTickFormatter:
    """Labels of a log axis (a colour bar over decades) in ``unit``, each tick with its own SI prefix, since one
    prefix cannot fit ``1 kB`` and ``10 GB``: ``10 MB``, ``500 µs``; a count (``""``, ``"1"``) or a unit that takes
    no prefix as :func:`si_formatter` writes it."""
    if unit not in PREFIXED:
        return si_formatter()
    return CustomJSTickFormatter(code=LOG_JS.replace("UNIT", unit.replace('"', "")))


def integer_ticker() -> BasicTicker:
    """Ticks at whole numbers only (ranks, nodes): no 0.5 on a four-rank axis."""
    return BasicTicker(min_interval=1, num_minor_ticks=0)
