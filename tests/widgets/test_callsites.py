"""The explorer's call-site view: mpiP call sites and CUBE call paths against the files' own summaries and the
readers' per-function values, the rank selection on per-rank formats, concise reports, and the tab itself."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import pytest
from bokeh.models import HoverTool
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit import text as fmt
from perfkit.io import cube, mpip
from perfkit.plots.callsites import TOP, callsite_bars
from perfkit.plots.palette import colour
from perfkit.widgets import callsites as module
from perfkit.widgets.callsites import callsite_view, has_callsites, read_callsites, site_table
from perfkit.widgets.explorer import explore
from tests.helpers import ROOT
from tests.io.test_cube import ALL as CUBES
from tests.io.test_mpip import GUIDE_28, GUIDE_35, HPCCG_2, REAL, half_ulp, section_rows, write_report
from tests.widgets.sliders import drag
from tests.widgets.test_explorer import tab_names
from tests.widgets.test_selection import show

hv.extension("bokeh")


def sites_of(path: Path) -> module.CallSites:
    form = "cube" if path.suffix == ".cubex" else "mpip"
    ds = perfkit.open_runs([path])
    return read_callsites(path, form, module.run_ranks(ds, str(ds["run"].values[0])))


@pytest.mark.parametrize("path", REAL, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_mpip_sites_against_the_reports_aggregate_time(path: Path):
    sites = sites_of(path)
    table = site_table(sites).set_index("site")
    by_id = dict(zip(sites.sites["site_id"], sites.sites["site"], strict=True))
    rows = mpip.callsites(path)
    rows = rows[~rows["aggregate"]]
    # count x mean [ms] of each rank row carries count x half a unit in the mean's last printed digit
    slack = rows.groupby("site").apply(lambda f: sum(c * half_ulp(m * 1e3) for c, m in zip(f["count"], f["time_mean"],
                                                                                           strict=True)))
    total, total_slack = table["time"].sum() * 1e3, slack.sum()
    for call, site, time_ms, _app, mpi_pct, *_ in section_rows(path, "Aggregate Time"):
        row, own = table.loc[by_id[int(site)]], slack[int(site)]
        assert row["function"] == "MPI_" + call
        assert abs(row["time"] * 1e3 - float(time_ms)) <= half_ulp(float(time_ms)) + own
        share = 100 * row["share"]  # mpiP's MPI%: the site's share of all MPI time, two decimals
        assert abs(share - float(mpi_pct)) <= 0.005 + share * (own / (row["time"] * 1e3) + total_slack / total)
    ds = mpip.read(path, label="r")
    per_function = ds["profile"].sel(run="r", metric="time").sum("rank").to_series()
    totals = table.groupby("function")["time"].sum()
    np.testing.assert_allclose(totals.to_numpy(), per_function[totals.index].to_numpy(), rtol=1e-12)
    assert table["calls"].sum() == ds["profile"].sel(run="r", metric="calls").sum().item()


def test_rank_selection_restricts_the_per_rank_numbers():
    sites = sites_of(HPCCG_2)
    rows = mpip.callsites(HPCCG_2)
    one = rows[rows["rank"] == 1].assign(site_words=lambda f: f["site"].map(
        dict(zip(sites.sites["site_id"], sites.sites["site"], strict=True))))
    table = site_table(sites, ranks=[1]).set_index("site")
    expected = one.set_index("site_words")
    assert set(table.index[table["time"] > 0]) == set(expected.index[expected["time"] > 0])
    for site, row in expected.iterrows():
        assert table.loc[site, "time"] == pytest.approx(row["time"])
        assert table.loc[site, "calls"] == row["count"]
        assert table.loc[site, "max"] == table.loc[site, "mean"] == table.loc[site, "min"] == pytest.approx(row["time"])
        assert table.loc[site, "rank_of_max"] == 1
    both = site_table(sites).set_index("site")
    assert (both["max"] >= both["mean"]).all() and (both["mean"] >= both["min"]).all()
    np.testing.assert_allclose(both["mean"], both["time"] / 2)
    assert both["share"].sum() == pytest.approx(1.0)


@pytest.mark.parametrize("path", CUBES, ids=lambda p: p.name)
def test_cube_call_paths_sum_to_the_readers_mpi_time(path: Path):
    sites = sites_of(path)
    table = site_table(sites)
    assert (table["function"].str.startswith("MPI_")).all()
    ds = cube.read(path)
    per_function = ds["profile"].isel(run=0).sel(metric="time").sum("rank").to_series().drop("Compute")
    totals = table.groupby("function")["time"].sum()
    np.testing.assert_allclose(totals.reindex(per_function.index, fill_value=0).to_numpy(), per_function.to_numpy(),
                               rtol=1e-12, atol=1e-12)
    assert table["site"].is_unique
    assert table["imbalance"].dropna().ge(1 - 1e-12).all()


def test_concise_reports_give_totals_over_every_rank(tmp_path: Path):
    site_rows = [{"id": 1, "op": "Allreduce", "parent": "solve(Matrix*)", "file": "src/a.c", "line": 12,
                  "rows": {0: (10, 2.0, 0), 1: (10, 3.0, 0), 2: (10, 4.0, 0)}},
                 {"id": 2, "op": "Send", "parent": "halo", "file": "src/b.c", "line": 40,
                  "rows": {0: (5, 1.0, 4000), 2: (5, 2.0, 8000)}}]
    path = write_report(tmp_path / "c.mpiP", 4, site_rows, style="concise")
    sites = sites_of(path)
    assert not sites.per_rank and sites.ranks.tolist() == [0, 1, 2, 3]
    table = site_table(sites, ranks=[0]).set_index("function")  # no per-rank rows: the selection cannot apply
    assert table.loc["MPI_Allreduce", "time"] == pytest.approx((20 + 30 + 40) / 1e3)
    assert table.loc["MPI_Allreduce", "max"] == pytest.approx(0.04) and table.loc["MPI_Allreduce", "min"] == 0.0
    assert table.loc["MPI_Send", "time"] == pytest.approx(0.015) and table.loc["MPI_Send", "bytes"] == 12000
    assert table.loc["MPI_Allreduce", "mean"] == pytest.approx(0.09 / 4)
    assert table["calls"].isna().all()
    assert table.loc["MPI_Allreduce", "site"] == "MPI_Allreduce @ a.c:12 (in solve)"
    view = callsite_view(sites, "c", ranks=np.array([0]))
    assert "whatever the rank selection" in view[0].object


def test_user_guide_reports_say_what_the_print_threshold_hid():
    hidden, whole = sites_of(GUIDE_28), sites_of(GUIDE_35)
    assert any("print threshold" in note for note in hidden.notes) and not whole.notes
    for sites in (hidden, whole):
        table = site_table(sites)
        assert table[["time", "calls", "max", "mean", "min", "share"]].notna().all().all()
        assert table["site"].is_unique and table["share"].sum() == pytest.approx(1.0)


def test_compressed_report_reads_as_the_plain_one(tmp_path: Path):
    packed = tmp_path / f"{HPCCG_2.name}.gz"
    with open(HPCCG_2, "rb") as plain, gzip.open(packed, "wb") as out:
        shutil.copyfileobj(plain, out)
    pd.testing.assert_frame_equal(site_table(read_callsites(packed, "mpip", [0, 1])),
                                  site_table(read_callsites(HPCCG_2, "mpip", [0, 1])))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["MPI_Send", "MPI_Recv"]),
                          st.lists(st.sampled_from(["main", "solve", "halo"]), max_size=3)), min_size=1, max_size=12))
def test_site_words_are_unique(cases):
    heads = [h for h, _ in cases]
    words = module._labels(heads, [c for _, c in cases], [f"site {i}" for i in range(len(cases))])
    assert len(set(words)) == len(words)
    assert all(w.startswith(h) for w, h in zip(words, heads, strict=True))


def test_explorer_tab_shows_bars_and_follows_the_rank_selection():
    paths = sorted((ROOT / "tests" / "data" / "mpip" / "real" / "HPCCG-strong").glob("*/*.mpiP"))
    ds = perfkit.open_runs(paths)
    run = next(str(r) for r in ds["run"].values if float(ds["nprocs"].sel(run=r)) == 16)
    assert has_callsites(ds)
    layout = explore(ds, run=run)
    assert "call sites" in tab_names(layout)
    layout.get_root()
    tab = show(layout, "call sites")
    (pane,) = tab.select(pn.pane.HoloViews)
    bars = pane.object
    table = site_table(sites_of(next(p for p in paths if p.parts[-2] == "16")))
    assert list(bars.data["site"]) == list(table["site"].head(TOP))
    assert bars.data["time"].tolist() == pytest.approx(table["time"].head(TOP).tolist())
    cmap = bars.opts.get().kwargs["cmap"]
    assert cmap["MPI_Allreduce"] == colour("MPI_Allreduce") and cmap["MPI_Send"] == colour("MPI_Send")
    (grid,) = tab.select(pn.widgets.Tabulator)
    assert len(grid.value) == len(table) and "share of MPI time [%]" in grid.value.columns
    drag(next(iter(layout.select(pn.widgets.IntRangeSlider))), (3, 4))  # the ranks in view: 3 and 4
    tab = show(layout, "call sites")
    (grid,) = tab.select(pn.widgets.Tabulator)
    part = site_table(sites_of(next(p for p in paths if p.parts[-2] == "16")), ranks=[3, 4])
    assert grid.value["site"].tolist() == part["site"].tolist() != table["site"].tolist()
    assert "2 ranks in view" in tab.select(pn.pane.Markdown)[0].object


def test_no_tab_without_call_sites():
    ds = perfkit.open_runs([ROOT / "data" / "synthetic" / "48" / "slt.mpinside"])
    assert not has_callsites(ds)
    assert "call sites" not in tab_names(explore(ds))
    moved = perfkit.open_runs([GUIDE_35]).assign_coords(source=("run", ["/nowhere/gone.mpiP"]))
    assert not has_callsites(moved)


def test_bars_put_the_most_time_at_the_top_with_time_ticks_and_hover_in_words():
    table = site_table(sites_of(HPCCG_2))
    fig = hv.render(callsite_bars(table, title="t", top=5))
    factors = [str(f) for f in fig.y_range.factors]
    assert factors[::-1] == table["site"].head(5).tolist()  # bokeh lays factors out bottom up
    assert fig.xaxis[0].axis_label == "MPI time" and fig.height == 110 + 26 * 5
    hover = next(t for t in fig.tools if isinstance(t, HoverTool))
    fields = {spec.strip("@{}") for _, spec in hover.tooltips}
    (source,) = {r.data_source for r in fig.renderers if hasattr(r, "data_source")}
    assert fields <= set(source.data)
    assert not any(fmt.unreadable(str(v)) for v in source.data["time_words"])
