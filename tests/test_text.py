"""Numbers in words (``perfkit.text``): units that fit, monotone, readable back within the shown precision."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfkit import text as fmt

TIME_UNITS = {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
SI = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
finite = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False, allow_infinity=False)
sizes = st.floats(min_value=0, max_value=1e17, allow_nan=False, allow_infinity=False)


def read_seconds(text: str) -> float:
    """The time [s] a ``seconds`` text stands for."""
    number, unit = text.split(" ")
    return float(number.replace(",", "")) * TIME_UNITS[unit]


def read_si(text: str, unit: str) -> float:
    """The value an SI text (``39.5 MB``, ``200 Mbit/s``) stands for, in base units."""
    number, shown = text.split(" ")
    assert shown.endswith(unit), text
    return float(number.replace(",", "")) * SI[shown[: -len(unit)]]


def shown_step(text: str) -> float:
    """Half a unit of the last digit shown in ``text``'s number: its rounding error at most."""
    number = text.split(" ")[0].replace(",", "")
    decimals = len(number.split(".")[1]) if "." in number else 0
    return 0.5 * 10.0 ** -decimals


@given(finite)
def test_seconds_read_back_within_the_shown_precision(value: float) -> None:
    text = fmt.seconds(value)
    assert not fmt.unreadable(text) and text.split(" ")[1] in TIME_UNITS
    unit = TIME_UNITS[text.split(" ")[1]]
    assert read_seconds(text) == pytest.approx(value, abs=shown_step(text) * unit * 1.0001 + 1e-300)


@given(finite, finite)
def test_seconds_are_monotone(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert read_seconds(fmt.seconds(low)) <= read_seconds(fmt.seconds(high))


@given(sizes, sizes)
def test_bytes_read_back_and_are_monotone(a: float, b: float) -> None:
    for value in (a, b):
        text = fmt.nbytes(value)
        assert read_si(text, "B") == pytest.approx(value, rel=5e-3, abs=0.5)
    low, high = sorted((a, b))
    assert read_si(fmt.nbytes(low), "B") <= read_si(fmt.nbytes(high), "B")


@given(sizes)
def test_rates_take_si_prefixes(value: float) -> None:
    assert read_si(fmt.bitrate(value), "bit/s") == pytest.approx(value, rel=5e-3, abs=5e-3)
    assert read_si(fmt.byterate(value), "B/s") == pytest.approx(value, rel=5e-3, abs=5e-3)


@given(st.floats(min_value=-10, max_value=10, allow_nan=False))
def test_percentages_read_back_and_show_no_exponent(fraction: float) -> None:
    text = fmt.percent(fraction)
    assert text.endswith("%") and not fmt.unreadable(text)
    assert float(text[:-1]) / 100 == pytest.approx(fraction, abs=0.005 * 1.0001 + 5e-4 * abs(fraction))


@given(st.integers(min_value=-10**12, max_value=10**12))
def test_counts_and_plain_numbers_have_thousands_separators(value: int) -> None:
    assert int(fmt.count(value).replace(",", "")) == value
    assert re.fullmatch(r"-?\d{1,3}(,\d{3})*", fmt.count(value))
    assert not fmt.unreadable(fmt.number(value))


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["rank", "run", "call"]))
def test_plural_agrees_with_the_count(n: int, word: str) -> None:
    text = fmt.plural(n, word)
    assert text.endswith(word if n == 1 else word + "s")


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0 s"), (-0.0, "0 s"), (61e-6, "61.0 µs"), (3.2e-3, "3.20 ms"), (4.7, "4.70 s"), (1191.3, "19.9 min"),
    (7560.0, "2.10 h"), (0.99996, "1.00 s"), (0.0009999, "1.00 ms"), (-0.77, "-770 ms"),
    (math.inf, "∞ s"), (-math.inf, "-∞ s"), (math.nan, fmt.MISSING),
])
def test_seconds_edge_cases(value: float, text: str) -> None:
    assert fmt.seconds(value) == text


def test_other_edge_cases_never_show_nan_or_exponents() -> None:
    assert fmt.nbytes(39.5e6) == "39.5 MB" and fmt.nbytes(999.6) == "1.00 kB" and fmt.nbytes(0) == "0 B"
    assert fmt.bitrate(200e6) == "200 Mbit/s" and fmt.byterate(0) == "0 B/s"
    assert fmt.percent(0.000507) == "0.051%" and fmt.percent(0.0996) == "10%" and fmt.percent(-0.3) == "-30%"
    assert fmt.count(2048.0) == "2,048" and fmt.count(None) == fmt.MISSING
    assert [fmt.number(v) for v in (2.0, 2.5, 1e6, -0.5)] == ["2", "2.5", "1,000,000", "-0.5"]
    assert fmt.significant(1234.6) == "1235" and fmt.significant(9.996) == "10.0"
    for formatter in (fmt.nbytes, fmt.bitrate, fmt.percent, fmt.ratio, fmt.number, fmt.significant):
        assert formatter(math.nan) == fmt.MISSING
        assert "∞" in formatter(math.inf) and not fmt.unreadable(formatter(-math.inf))


def test_ranks_agree_and_cut_long_lists() -> None:
    assert fmt.ranks([3]) == "rank 3" and fmt.ranks([0, 1, 2, 7]) == "ranks 0-2, 7"
    assert fmt.rank_ranges(range(0, 40, 2), limit=3) == "0, 2, 4 and 17 more ranges"
    assert fmt.rank_ranges([1, 3], limit=1) == "1 and 1 more range"


def test_unreadable_finds_what_a_reader_should_not_see() -> None:
    assert fmt.unreadable("1.19e+03 s, nan%, None, np.float64(2.0), inf, 2E-5") == [
        "1.19e+03", "nan", "np.", "float64", "inf", "2E-5", "None"]
    assert not fmt.unreadable("none of the 2,048 ranks; information; 1.00 µs; 3 MB")
