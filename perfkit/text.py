"""Numbers in words, as a performance engineer writes them: one module for every sentence and table.

Times take a unit that fits (``61.0 µs``, ``3.20 ms``, ``4.70 s``, ``19.9 min``, ``2.10 h``), bytes
and rates SI prefixes (``39.5 MB``, ``200 Mbit/s``, ``12.5 MB/s``), counts thousands separators
(``2,048``), fractions percentages (``65%``, ``0.051%``), and nouns agree with their count
(``1 rank``, ``3 ranks``). Three significant digits by default, in fixed-point notation (never
``1.19e+03``). A missing value (None, NaN) is never written as such: the formatters say
``MISSING`` and sentence builders drop the sentence instead. Infinity is ``∞``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

#: What a formatter writes for a value the data do not hold.
MISSING = "not in the report"
#: (threshold, scale, unit) of ``seconds``, largest first; below the last, microseconds.
_TIME_UNITS = ((7200.0, 3600.0, "h"), (120.0, 60.0, "min"), (1.0, 1.0, "s"), (1e-3, 1e-3, "ms"), (0.0, 1e-6, "µs"))
_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def missing(value: Any) -> bool:
    """Whether ``value`` is absent: None, NaN (Python or numpy) or an empty string."""
    if value is None:
        return True
    if isinstance(value, str):
        return value == ""
    try:
        return bool(np.isnan(value))
    except TypeError:
        return False


def _rounded(value: float, digits: int) -> float:
    """``value`` rounded to ``digits`` significant digits."""
    return float(f"{value:.{digits - 1}e}")


def significant(value: float, digits: int = 3, signed: bool = False) -> str:
    """``value`` to ``digits`` significant digits in fixed-point notation (never ``1e+03``); 0 unsigned.
    Whole numbers of more digits keep them all (``1235``)."""
    value = float(value)
    if math.isnan(value):
        return MISSING
    if math.isinf(value):
        return ("+" if signed and value > 0 else "-" if value < 0 else "") + "∞"
    if abs(value) >= 10 ** (digits - 1):  # whole numbers keep every digit: 1235, not 1230
        return "0" if round(value) == 0 else f"{value:{'+' if signed else ''}.0f}"
    value = _rounded(value, digits)
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:{'+' if signed else ''}.{decimals}f}"


def number(value: float, digits: int = 3) -> str:
    """A plain number to ``digits`` significant digits, trailing zeros dropped: ``2``, ``2.5``, ``1,000,000``."""
    if missing(value):
        return MISSING
    text = significant(value, digits)
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    sign, digits_text = ("-", text[1:]) if text.startswith("-") else ("", text)
    whole, dot, fraction = digits_text.partition(".")
    return sign + (f"{int(whole):,}" if whole.isdigit() else whole) + dot + fraction


def _scaled(value: float, units: Iterable[tuple[float, float, str]], digits: int, signed: bool) -> str:
    """``value`` in the first unit whose threshold its rounded size reaches (``(threshold, scale, unit)``)."""
    if math.isnan(value):
        return MISSING
    chosen = list(units)
    for floor, scale, unit in chosen:
        shown = _rounded(value / scale, digits)
        if abs(shown) * scale >= floor and shown != 0:
            return f"{significant(value / scale, digits, signed)} {unit}"
    return f"0 {chosen[-1][2]}"


def seconds(value: float, signed: bool = False, digits: int = 3) -> str:
    """A time [s] with a unit that fits: ``61.0 µs``, ``12.3 ms``, ``1.93 s``, ``19.9 min``, ``2.50 h``."""
    value = float(value)
    if math.isinf(value):
        return f"{significant(value, signed=signed)} s"
    if value == 0:
        return "0 s"
    return _scaled(value, _TIME_UNITS, digits, signed)


def _si(value: float, unit: str, signed: bool, digits: int, integer_below: bool) -> str:
    """``value`` with an SI prefix on ``unit`` (1000 steps); below 1000 an integer when ``integer_below``."""
    value = float(value)
    if math.isnan(value):
        return MISSING
    if math.isinf(value):
        return f"{significant(value, signed=signed)} {unit}"
    for scale, prefix in _SI:
        shown = _rounded(value / scale, digits)
        if abs(shown) >= 1:
            return f"{significant(value / scale, digits, signed)} {prefix}{unit}"
    if integer_below:
        return f"{value:{'+' if signed and value != 0 else ''},.0f} {unit}"
    return f"{significant(value, digits, signed)} {unit}"


def nbytes(value: float, signed: bool = False, digits: int = 3) -> str:
    """Bytes with an SI prefix (powers of 1000): ``512 B``, ``39.5 MB``, ``1.20 TB``."""
    return _si(value, "B", signed, digits, integer_below=True)


#: Writers of a value in the units that have their own (``s``: :func:`seconds`, ``B``: :func:`nbytes`); each takes
#: ``signed=``.
UNIT_WRITERS = {"s": seconds, "B": nbytes}


def bitrate(value: float, digits: int = 3) -> str:
    """A rate in bits per second with an SI prefix: ``200 Mbit/s``, ``10.0 Gbit/s``."""
    return _si(value, "bit/s", False, digits, integer_below=False)


def byterate(value: float, digits: int = 3) -> str:
    """A rate in bytes per second with an SI prefix: ``12.5 MB/s``."""
    return _si(value, "B/s", False, digits, integer_below=False)


def count(value: float, signed: bool = False) -> str:
    """A count as an integer with thousands separators: ``2,048``; ``MISSING`` when absent."""
    if missing(value):
        return MISSING
    value = float(value)
    if math.isinf(value):
        return significant(value, signed=signed)
    return f"{value:{'+' if signed and round(value) != 0 else ''},.0f}"


def percent(fraction: float, signed: bool = False) -> str:
    """A fraction (0-1) as a percentage: two significant digits below 10 % (``0.051%``), else whole (``65%``)."""
    if missing(fraction):
        return MISSING
    value = 100 * float(fraction)
    if math.isinf(value):
        return significant(value, signed=signed) + "%"
    if abs(round(value)) < 10:
        return f"{significant(value, 2, signed)}%"
    return f"{value:{'+' if signed else ''}.0f}%"


def ratio(value: float, signed: bool = False) -> str:
    """A ratio (an efficiency, a speed-up) to two decimals: ``0.62``."""
    if missing(value):
        return MISSING
    value = float(value)
    if math.isinf(value):
        return significant(value, signed=signed)
    return f"{value:{'+' if signed else ''}.2f}"


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 rank``, ``4 ranks``, ``2,048 runs`` (``words`` for an irregular plural)."""
    return f"{int(n):,} {word if int(n) == 1 else (words or word + 's')}"


def rank_ranges(ranks: Iterable[int], limit: int = 6) -> str:
    """Ranks as contiguous ranges, e.g. ``0-3, 7, 9-12``; more than ``limit`` ranges are cut."""
    values = np.unique(np.asarray(list(ranks), dtype=np.int64))
    if values.size == 0:
        return "none"
    breaks = np.flatnonzero(np.diff(values) != 1)
    starts = values[np.r_[0, breaks + 1]]
    ends = values[np.r_[breaks, values.size - 1]]
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in zip(starts, ends)]
    more = len(parts) - limit
    return ", ".join(parts[:limit]) + (f" and {more} more {'range' if more == 1 else 'ranges'}" if more > 0 else "")


def ranks(values: Iterable[int], limit: int = 6) -> str:
    """``rank 3`` or ``ranks 0-3, 7``: the noun agreeing with how many ranks there are."""
    values = np.unique(np.asarray(list(values), dtype=np.int64))
    return f"{'rank' if values.size == 1 else 'ranks'} {rank_ranges(values, limit)}"


def names(values: Sequence[str], limit: int) -> str:
    """The first ``limit`` of ``values`` joined by commas, and how many more: ``a, b and 3 more``."""
    more = len(values) - limit
    return ", ".join(values[:limit]) + (f" and {more} more" if more > 0 else "")


def sentences(*parts: str) -> str:
    """Sentences joined by one space, empty ones dropped."""
    return " ".join(part.strip() for part in parts if part and part.strip())


_UNREADABLE = re.compile(r"\bnan\b|\binf(?:inity)?\b|\d+(?:\.\d*)?[eE][+-]?\d+|\bnp\.|float64|int64", re.IGNORECASE)


def unreadable(text: str) -> list[str]:
    """What in ``text`` a reader should not see: NaN, None, inf, ``1e+03`` exponents, ``np.float64``."""
    return [m.group(0) for m in _UNREADABLE.finditer(text)] + re.findall(r"\bNone\b", text)
