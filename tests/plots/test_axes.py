"""Tick labels with units, run as bokeh runs them: the formatter's JavaScript over a whole axis of ticks."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from bokeh.models import AdaptiveTicker, BasicTicker, CompositeTicker

from perfkit.plots.axes import log_unit_formatter, si_formatter, time_ticker, unit_formatter, unit_ticker

NODE = shutil.which("node")


def labels(unit: str, ticks: list[float], formatter=unit_formatter) -> list[str]:
    """What ``formatter(unit)`` labels ``ticks`` with, run by node as bokeh calls it (tick, index, ticks)."""
    code = formatter(unit).code
    script = (f"const f = (tick, index, ticks) => {{ {code} }};\n"
              f"const ticks = {json.dumps(ticks)};\n"
              "console.log(JSON.stringify(ticks.map((t, i) => f(t, i, ticks))));")
    return json.loads(subprocess.run([NODE, "-e", script], capture_output=True, text=True, check=True).stdout)


pytestmark = pytest.mark.skipif(NODE is None, reason="node (to run the formatters' JavaScript) is not installed")


def test_bytes_read_with_one_prefix_per_axis():
    assert labels("B", [0, 5e6, 1e7, 1.5e7, 2e7]) == ["0 MB", "5 MB", "10 MB", "15 MB", "20 MB"]
    assert labels("B", [0, 500, 1000]) == ["0 kB", "0.5 kB", "1 kB"]
    assert labels("B", [0, 200, 400]) == ["0 B", "200 B", "400 B"]
    assert labels("B", [2.5e9]) == ["2.5 GB"]


def test_times_in_a_unit_that_fits():
    assert labels("s", [0, 0.25, 0.5, 0.75]) == ["0", "250 ms", "500 ms", "750 ms"]
    assert labels("s", [0, 5, 10, 15, 20]) == ["0", "5 s", "10 s", "15 s", "20 s"]
    assert labels("s", [0, 2e-5, 4e-5]) == ["0", "20 µs", "40 µs"]
    assert labels("s", [0, 600, 1200]) == ["0", "10 min", "20 min"]


def test_counts_without_unit():
    assert labels("1", [0, 2e7]) == ["0", "20 M"]


def test_time_axes_tick_at_round_numbers_of_their_unit():
    ticker = time_ticker()
    assert isinstance(ticker, CompositeTicker) and isinstance(unit_ticker("B"), BasicTicker)
    assert isinstance(unit_ticker("s"), CompositeTicker)
    seconds, minutes, hours = ticker.tickers
    assert all(isinstance(t, AdaptiveTicker) for t in ticker.tickers)
    steps = sorted({m * minutes.base ** k for m in minutes.mantissas for k in (0, 1)
                    if minutes.min_interval <= m * minutes.base ** k <= minutes.max_interval})
    assert steps == [30, 60, 120, 300, 600, 900, 1800]  # 0.5, 1, 2, 5, 10, 15, 30 min: no 20 s = 0.333 min
    assert seconds.max_interval <= 20 and list(seconds.mantissas) == [1, 2, 5] and seconds.base == 10
    assert hours.base == 3600 and hours.min_interval == 3600


def test_log_axes_give_each_decade_its_own_prefix():
    assert labels("B", [1e3, 1e5, 1e7, 1e9, 1e10], log_unit_formatter) == ["1 kB", "100 kB", "10 MB", "1 GB", "10 GB"]
    assert labels("s", [1e-6, 1e-4, 1e-2, 1, 2.5e1], log_unit_formatter) == ["1 µs", "100 µs", "10 ms", "1 s", "25 s"]
    assert labels("B", [12, 0], log_unit_formatter) == ["12 B", "0"]
    assert log_unit_formatter("1").code == si_formatter().code  # a count: 10 M, no unit to prefix
