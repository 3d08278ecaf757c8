"""Scaling tables: the seed's speedup example, Dataset runs, grouping, weak scaling, plots."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import perfkit
from perfkit.analysis.models import fit_amdahl
from perfkit.analysis.scaling import best_configuration, scaling
from perfkit.model import combine_runs, make_run

FUNCS = ["Compute", "MPI_Send", "MPI_Allreduce", "w_MPI_Recv"]
CALLS = ["Compute", "MPI_Send", "MPI_Allreduce", "MPI_Recv"]
KINDS = ["compute", "transfer", "wait_collective", "wait_late_sender"]


def one_run(n: int, *, label: str, elapsed: float = np.nan, compute: float = 100.0, **meta) -> xr.Dataset:
    """n ranks: Compute = compute/n, Send 1 s, Allreduce 0.5*log2(2n), rank r waits 0.1*r."""
    prof = np.zeros((n, len(FUNCS), 6))
    prof[:, 0, 0] = compute / n
    prof[:, 1, 0] = 1.0
    prof[:, 2, 0] = 0.5 * np.log2(2 * n)
    prof[:, 3, 0] = 0.1 * np.arange(n)
    prof[:, 1, 2] = 1e6 * n  # bytes_sent per rank
    return make_run(
        prof,
        ranks=range(n),
        functions=FUNCS,
        calls=CALLS,
        kinds=KINDS,
        run=dict(label=label, nprocs=n, elapsed=elapsed, **meta),
    )


@pytest.fixture
def runs() -> xr.Dataset:
    return combine_runs([one_run(n, label=f"n{n}", nodes=max(1, n // 4)) for n in (1, 2, 4, 8)])


def slowest(n: int, compute: float = 100.0) -> float:
    return compute / n + 1.0 + 0.5 * np.log2(2 * n) + 0.1 * (n - 1)


def test_seed_example_speedups_and_normalisation():
    table = scaling([1, 10, 1, 10], elapsed=[1000, 100, 810, 90], by={"system": ["A", "A", "B", "B"]}, normalise=True)
    at10 = table[table["nprocs"] == 10].set_index("system")
    assert at10.loc["A", "speedup"] == pytest.approx(10)
    assert at10.loc["B", "speedup"] == pytest.approx(9)
    assert at10.loc["A", "efficiency"] == pytest.approx(1.0)
    assert at10.loc["B", "efficiency"] == pytest.approx(0.9)
    assert at10.loc["A", "normalised_speedup"] == pytest.approx(10)
    assert round(at10.loc["B", "normalised_speedup"], 2) == 11.11
    assert at10.loc["B", "jobs_per_hour"] == pytest.approx(40)
    assert at10.loc["A", "jobs_per_day"] == pytest.approx(864)


def test_dataset_uses_elapsed_coordinate_else_slowest_rank():
    ds = combine_runs([one_run(1, label="a", elapsed=120.0), one_run(4, label="b")])
    table = scaling(ds).set_index("run")
    assert table.loc["a", "elapsed"] == 120.0
    assert table.loc["a", "source"] == "elapsed coordinate"
    assert table.loc["b", "elapsed"] == pytest.approx(slowest(4))
    assert table.loc["b", "source"] == "max over ranks"
    assert "elapsed coordinate" in table.attrs["elapsed_source"]


def test_base_need_not_be_one_process(runs):
    table = scaling(runs.isel(run=[1, 2, 3])).set_index("nprocs")
    assert (table["base_nprocs"] == 2).all()
    assert table.loc[8, "ideal_speedup"] == 4
    assert table.loc[8, "speedup"] == pytest.approx(slowest(2) / slowest(8))
    assert table.loc[8, "efficiency"] == pytest.approx(slowest(2) / slowest(8) / 4)


def test_base_by_process_count_and_by_run_label(runs):
    by_n = scaling(runs, base=4).set_index("nprocs")
    by_label = scaling(runs, base="n4").set_index("nprocs")
    assert by_n.loc[4, "speedup"] == pytest.approx(1)
    assert by_n.loc[1, "speedup"] == pytest.approx(slowest(4) / slowest(1))
    pd.testing.assert_series_equal(by_n["speedup"], by_label["speedup"])
    with pytest.raises(ValueError, match="nprocs=3"):
        scaling(runs, base=3)


def test_per_kind_and_per_call_groupby(runs):
    kinds = scaling(runs, group="kind")
    compute = kinds[kinds["kind"] == "compute"].set_index("nprocs")
    assert compute["efficiency"].to_numpy() == pytest.approx(1.0)
    coll = kinds[kinds["kind"] == "wait_collective"].set_index("nprocs")
    assert coll.loc[8, "elapsed"] == pytest.approx(2.0)
    calls = scaling(runs, group="call")
    recv = calls[calls["call"] == "MPI_Recv"].set_index("nprocs")
    assert recv.loc[8, "elapsed"] == pytest.approx(0.7)  # slowest rank waits 0.1 * 7
    per_function = scaling(runs, group="function", reduce="mean")
    recv_mean = per_function[per_function["function"] == "w_MPI_Recv"].set_index("nprocs")
    assert recv_mean.loc[8, "elapsed"] == pytest.approx(0.35)


def test_metric_other_than_time_total_bytes(runs):
    table = scaling(runs, metric="bytes_sent").set_index("nprocs")
    assert table.loc[8, "bytes_sent"] == pytest.approx(8 * 8e6)
    assert table.loc[8, "ratio"] == pytest.approx(64)
    assert table.attrs["units"] == "B"
    assert "speedup" not in table.columns


def test_weak_scaling_efficiency():
    n = np.array([1, 2, 4, 8, 16])
    t = 10.0 * (1 + 0.1 * np.log2(n))
    table = scaling(n, elapsed=t, kind="weak").set_index("nprocs")
    assert table["efficiency"].to_numpy() == pytest.approx(10.0 / t)
    assert table.loc[16, "speedup"] == pytest.approx(16 * 10.0 / t[-1])


def test_grouping_by_arbitrary_run_coordinates_and_best_configuration():
    parts = []
    for fabric, slow in (("ib", 1.0), ("gige", 3.0)):
        for ppn in (4, 8):
            for nodes in (1, 2, 4):
                n = nodes * ppn
                label = f"{fabric}-{ppn}-{nodes}"
                t = 1000 / n + slow * nodes + 0.5 * ppn
                parts.append(one_run(n, label=label, elapsed=t, nodes=nodes, ppn=ppn, system=fabric))
    ds = combine_runs(parts)
    ds = ds.assign_coords(interconnect=("run", [str(s) for s in ds["system"].values]))
    table = scaling(ds, by=["interconnect", "ppn"])
    assert table.groupby(["interconnect", "ppn"]).ngroups == 4
    best = best_configuration(table, at="nodes")
    assert list(best["nodes"]) == [1, 2, 4]
    assert set(best["interconnect"]) == {"ib"}
    assert list(best["ppn"]) == [8, 8, 8]


def test_jobs_per_day_per_system_of_given_size():
    table = scaling([8, 16], elapsed=[100.0, 60.0], system_size=32)
    assert table["jobs_per_day"].to_numpy() == pytest.approx([4 * 864, 2 * 1440])


def test_dataframe_input_with_named_columns():
    df = pd.DataFrame({"np": [1, 2, 4], "wall": [10.0, 6.0, 4.0], "lib": ["x", "x", "x"]})
    table = scaling(df, nprocs="np", elapsed="wall", by="lib")
    assert table["speedup"].to_numpy() == pytest.approx([1, 10 / 6, 2.5])


def test_clear_errors():
    with pytest.raises(ValueError, match="kind"):
        scaling([1, 2], elapsed=[2, 1], kind="sideways")
    with pytest.raises(ValueError, match="Dataset"):
        scaling([1, 2], elapsed=[2, 1], group="kind")
    with pytest.raises(ValueError, match="different base"):
        scaling([1, 2, 2, 4], elapsed=[4, 2, 3, 2], by={"s": ["a", "a", "b", "b"]}, normalise=True)


def test_lazy_top_level_names():
    assert perfkit.scaling is scaling
    assert perfkit.fit_amdahl is fit_amdahl


def test_plots_are_built_from_results(runs):
    from perfkit.plots import scaling as plots

    hv.extension("bokeh")
    table = scaling(runs)
    fit = fit_amdahl(table)
    assert isinstance(plots.time_vs_procs(table), hv.Overlay)
    assert isinstance(plots.time_vs_procs(table, fit=fit), hv.Overlay)
    assert isinstance(plots.efficiency_vs_procs(table), hv.Overlay)
    assert isinstance(plots.speedup_vs_procs(table), hv.Overlay)
    assert isinstance(plots.stacked_time(scaling(runs, group="kind")), hv.Bars)


def test_widget_panel_builds(runs):
    from perfkit.widgets.scaling import scaling_panel

    hv.extension("bokeh")
    panel = scaling_panel(runs.assign_coords(system=("run", ["a", "a", "b", "b"])))
    assert panel is not None


def test_a_run_without_measured_values_is_left_out_not_measured():
    from tests.helpers import small_run

    a, b = small_run("a", 4, seed=1), small_run("b", 8, seed=2)
    b["profile"][:] = np.nan
    ds = combine_runs([a, b]).assign_coords(elapsed=("run", [20.0, 15.0]))  # b's elapsed alone is no measurement
    with pytest.warns(perfkit.PerfkitWarning, match="runs b hold no measured values"):
        table = scaling(ds)
    assert table["run"].tolist() == ["a"]
    with pytest.warns(perfkit.PerfkitWarning, match="runs b hold no measured values"), \
            pytest.raises(ValueError, match="no runs with a finite value"):
        scaling(ds.sel(run=["b"]))
