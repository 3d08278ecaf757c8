"""The per-rank figure's pieces: band outlines, binned markers, and which ranks a box or lasso covers."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from perfkit.plots.rank_figure import RANK_TICKS_JS, RankFigure, envelope, in_polygon, ranks_inside, stack_patches

finite = st.floats(-1e6, 1e6, allow_nan=False, width=64)


def test_bands_are_outlines_of_the_stack():
    table = pd.DataFrame({"Compute": [1.0, 2.0, 3.0], "MPI_Recv": [0.5, np.nan, 1.0]}, index=[4, 5, 6])
    outline, data = stack_patches(table, step=1)
    assert data["group"] == ["Compute", "MPI_Recv"] and data["last"] == [6, 6]
    assert outline.tolist() == [4, 5, 6, 6, 5, 4]  # the same for every band, sent once
    assert data["ys"][0].tolist() == [1, 2, 3, 0, 0, 0]
    assert data["ys"][1].tolist() == [1.5, 2, 4, 3, 2, 1]  # on top of compute, NaN as 0


@given(arrays(np.float64, st.integers(0, 5000), elements=finite), st.integers(4, 300))
@settings(max_examples=60, deadline=None)
def test_envelope_keeps_each_bins_highest_and_lowest(values, most):
    keep = envelope(values, most)
    assert np.all(np.diff(keep) > 0) and keep.size <= max(most, values.size if values.size <= most else 0)
    if values.size <= most:
        assert keep.tolist() == list(range(values.size))
        return
    step = -(-values.size // (most // 2))
    bins = pd.Series(values).groupby(np.arange(values.size) // step)
    drawn = pd.Series(values[keep]).groupby(keep // step)
    assert np.array_equal(drawn.max(), bins.max()) and np.array_equal(drawn.min(), bins.min())


@given(arrays(np.float64, 200, elements=st.floats(0, 10, width=64)), finite, finite, finite, finite)
@settings(max_examples=60, deadline=None)
def test_a_box_covers_the_ranks_whose_point_lies_inside(totals, x0, x1, y0, y1):
    ranks = np.arange(200) * 3
    got = ranks_inside(ranks, totals, [x0, x1], [y0, y1])
    expected = [r for r, t in zip(ranks, totals)
                if min(x0, x1) <= r <= max(x0, x1) and min(y0, y1) <= t <= max(y0, y1)]
    assert got.tolist() == expected
    # the same box as a lasso of its four corners (points on its edges aside)
    lasso = ranks_inside(ranks, totals, [x0, x1, x1, x0], [y0, y0, y1, y1])
    strict = [r for r, t in zip(ranks, totals)
              if min(x0, x1) < r < max(x0, x1) and min(y0, y1) < t < max(y0, y1)]
    assert set(strict) <= set(lasso.tolist()) <= set(expected)


@given(st.lists(st.tuples(finite, finite), min_size=3, max_size=3), arrays(np.float64, (300, 2), elements=finite))
@settings(max_examples=80, deadline=None)
def test_a_lasso_triangle_agrees_with_barycentric_coordinates(corners, points):
    (ax, ay), (bx, by), (cx, cy) = corners
    area = (bx - ax) * (cy - ay) - (cx - ax) * (by - ay)
    if abs(area) < 1e-3:
        return
    px, py = points[:, 0], points[:, 1]
    s = ((bx - px) * (cy - py) - (cx - px) * (by - py)) / area
    t = ((cx - px) * (ay - py) - (ax - px) * (cy - py)) / area
    u = 1 - s - t
    clear = np.minimum.reduce([np.abs(s), np.abs(t), np.abs(u)]) > 1e-9  # points on an edge may go either way
    inside = (s > 0) & (t > 0) & (u > 0)
    got = in_polygon(px, py, np.array([ax, bx, cx]), np.array([ay, by, cy]))
    assert np.array_equal(got[clear], inside[clear])


def test_a_lasso_around_two_separate_runs_of_ranks():
    ranks, totals = np.arange(10), np.full(10, 5.0)
    # a U: down over ranks 1-2, along above every total, down again over 7
    x = [0.5, 0.5, 2.5, 2.5, 6.5, 6.5, 7.5, 7.5]
    y = [20, 0, 0, 10, 10, 0, 0, 20]
    assert ranks_inside(ranks, totals, x, y).tolist() == [1, 2, 7]
    assert ranks_inside(ranks, totals, [3.5], [1.0]).size == 0  # a point: nothing


def test_tick_models_change_with_the_unit_only():
    view = RankFigure(selectable=True)
    table = pd.DataFrame({"Compute": [1.0, 2.0]}, index=[0, 1])
    args = {"step": 1, "last": 1, "colours": {"Compute": "#1f77b4"}, "title": "a", "ylabel": "time [s]"}
    view.show_bands(table, unit="s", **args)
    formatter = view.figure.yaxis[0].formatter
    view.show_bands(table * 2, unit="s", **args)
    assert view.figure.yaxis[0].formatter is formatter
    view.show_bands(table, unit="B", **{**args, "ylabel": "bytes_sent [B]"})
    assert view.figure.yaxis[0].formatter is not formatter and "B" in view.figure.yaxis[0].formatter.code
    assert view.figure.yaxis[0].axis_label == "bytes_sent [B]"
    assert view.total_hover.tooltips[1] == ("total", "@total{B}")
    assert (view.mapper.factors, view.mapper.palette) == (["Compute"], ["#1f77b4"])


@pytest.mark.parametrize("top", [0.0, 2.0])
def test_ranges_follow_the_data(top):
    view = RankFigure()
    view.show_totals(np.array([10, 20, 30]), np.array([1.0, 2.0, 1.5]), top)
    assert (view.figure.x_range.start, view.figure.x_range.end) == (9.5, 30.5)
    assert view.figure.y_range.end == (1.0 if top == 0 else pytest.approx(2.1))


@pytest.mark.skipif(shutil.which("node") is None, reason="node (to run the formatter's JavaScript) is not installed")
def test_rank_ticks_read_in_thousands_only_where_exact():
    def labels(ticks: list[int]) -> list[str]:
        script = (f"const f = (tick, index, ticks) => {{ {RANK_TICKS_JS} }};\nconst ticks = {json.dumps(ticks)};\n"
                  "console.log(JSON.stringify(ticks.map((t, i) => f(t, i, ticks))));")
        run = subprocess.run([shutil.which("node"), "-e", script], capture_output=True, text=True, check=True)
        return json.loads(run.stdout)

    assert labels([0, 20000, 40000, 100000]) == ["0", "20k", "40k", "100k"]
    assert labels([60000, 60125, 60250]) == ["60000", "60125", "60250"]  # zoomed in: exact ranks
    assert labels([0, 500, 1000, 2000]) == ["0", "500", "1000", "2000"]
    assert labels([0, 2_000_000, 4_000_000]) == ["0", "2M", "4M"]
