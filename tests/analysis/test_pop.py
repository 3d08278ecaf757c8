"""POP efficiencies: against the synthetic generator's own perfect-network re-run, identities, sources."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.pop import EFFICIENCIES, pop_metrics
from perfkit.analysis.waits import merge_wait_modes, wait_split
from perfkit.analysis.whatif import whatif
from perfkit.model import make_run
from tests.helpers import ROOT

SYNTH = ROOT / "data" / "synthetic"


def truth_pop(n: int) -> dict[str, float]:
    """POP efficiencies from the generator's truth: true compute per rank, elapsed and perfect-network elapsed.

    The region starts when the first rank leaves MPI_Init (the generator's start-up time per rank,
    as it wrote it in the MPI_Init column): ``pop_metrics`` leaves start-up out.
    """
    truth = json.loads((SYNTH / str(n) / "truth.json").read_text())
    compute, elapsed = np.asarray(truth["compute"]), truth["elapsed"]
    init = float(perfkit.open_profile(SYNTH / str(n) / "basic.mpinside")["profile"]
                 .sel(function="MPI_Init", metric="time").min())
    basic, perfect = elapsed["basic"] - init, elapsed["perfect"] - init
    return {"load_balance": compute.mean() / compute.max(),
            "serialisation_efficiency": compute.max() / perfect,
            "transfer_efficiency": perfect / basic,
            "parallel_efficiency": compute.mean() / basic}


@pytest.mark.parametrize("n", [48, 96, 384])
def test_measured_waits_match_the_generators_ideal_network(n):
    """Transfer efficiency from measured waits vs the generator re-run on a perfect interconnect."""
    runs = {m: perfkit.open_profile(SYNTH / str(n) / f"{m}.mpinside") for m in ("slt", "collective_wait", "basic")}
    pop = pop_metrics(merge_wait_modes(runs["slt"], runs["collective_wait"]))
    for name, true in truth_pop(n).items():
        assert float(pop[name][0]) == pytest.approx(true, abs=0.002), name
    assert set(pop["evidence"].values[0]) == {"measured"}
    modelled = pop_metrics(runs["basic"])
    assert modelled["evidence"].sel(efficiency="transfer_efficiency").item() == "modelled"
    assert "MPI_Bcast" in modelled["note"].sel(efficiency="transfer_efficiency").item()
    # the estimated split leaves waiting in "transfer": transfer efficiency too low, never too high
    assert float(modelled["transfer_efficiency"][0]) < truth_pop(n)["transfer_efficiency"]


def test_scalability_across_the_series_against_truth():
    ds = perfkit.open_runs(str(SYNTH / "*" / "collective_wait.mpinside"))
    pop = pop_metrics(ds)
    totals = {n: sum(json.loads((SYNTH / str(n) / "truth.json").read_text())["compute"])
              for n in (48, 96, 192, 384, 768, 2048)}
    for run, n in zip(ds["run"].values, ds["nprocs"].values.astype(int)):
        assert float(pop["computation_scalability"].sel(run=run)) == pytest.approx(totals[48] / totals[n], rel=1e-4)
    np.testing.assert_allclose(pop["global_efficiency"], pop["parallel_efficiency"] * pop["computation_scalability"])
    weak = pop_metrics(ds, weak=True)
    np.testing.assert_allclose(weak["computation_scalability"],
                               pop["computation_scalability"] * ds["nprocs"].values / 48)
    assert "weak scaling" in str(weak["note"].sel(efficiency="computation_scalability").values[0])


@st.composite
def runs(draw):
    """A run of 2-6 ranks: compute, a transfer, its measured wait and I/O per rank [s]."""
    n = draw(st.integers(2, 6))
    seconds = st.floats(0.0, 10.0, allow_nan=False)
    prof = np.zeros((n, 4, 6))
    for f in range(4):
        prof[:, f, 0] = draw(st.lists(seconds, min_size=n, max_size=n))
    prof[:, 0, 0] += 0.1  # every rank computes something
    prof[:, 1:3, 1] = 1.0
    extra = draw(st.floats(0.0, 5.0))
    longest = float(prof[..., 0].sum(axis=1).max())
    return make_run(prof, ranks=range(n), functions=["Compute", "MPI_Recv", "w_MPI_Recv", "MPI_File_read"],
                    calls=["Compute", "MPI_Recv", "MPI_Recv", "MPI_File_read"],
                    kinds=["compute", "transfer", "wait_late_sender", "io"],
                    run={"label": "r", "nprocs": n, "elapsed": longest + extra})


@settings(max_examples=60, deadline=None)
@given(ds=runs())
def test_hierarchy_identities(ds):
    pop = pop_metrics(ds)
    v = {name: float(pop[name][0]) for name in EFFICIENCIES}
    assert v["parallel_efficiency"] == pytest.approx(v["load_balance"] * v["communication_efficiency"])
    assert v["communication_efficiency"] == pytest.approx(v["serialisation_efficiency"] * v["transfer_efficiency"])
    assert all(0 < x <= 1 + 1e-12 for x in v.values())
    compute = ds["profile"].sel(metric="time", function="Compute").values[0]
    io = ds["profile"].sel(metric="time", function="MPI_File_read").values[0]
    ideal = float(pop["ideal_elapsed"][0])
    assert float(np.max(compute + io)) - 1e-9 <= ideal <= float(pop["elapsed"][0]) + 1e-9
    assert set(pop["evidence"].values[0]) == {"measured"}


def test_one_rank_and_no_blocking_calls():
    """A run whose ranks call only MPI_Comm_rank/size (IPM's region test) gets numbers, not a traceback."""
    ds = perfkit.open_profile(ROOT / "tests" / "data" / "ipm" / "IPM_test_fuerling.1372848898.ipm.xml")
    quiet = ds.sel(function=ds["kind"] != "transfer")
    assert set(quiet["kind"].values) == {"compute", "other"}
    assert wait_split(quiet)["call"].size == 0
    pop = pop_metrics(quiet)
    assert float(pop["transfer_efficiency"][0]) == pytest.approx(1.0)  # nothing to transfer
    assert 0 < float(pop["parallel_efficiency"][0]) <= 1
    found = diagnose(quiet)
    assert len(found) and found["text"].str.len().gt(0).all()
    out = whatif(quiet, "balance")
    assert float(out["speedup_low"][0]) <= float(out["speedup"][0]) <= float(out["speedup_high"][0])


def test_concise_report_is_unavailable_except_what_it_states(tmp_path):
    from tests.io.test_mpip import write_report

    sites = [{"id": 1, "op": "Allreduce", "parent": "main", "file": "a.c", "line": 10,
              "rows": {0: (10, 50.0, 8), 1: (10, 250.0, 8), 2: (10, 120.0, 8)}}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        verbose = perfkit.open_profile(write_report(tmp_path / "v.mpiP", 3, sites))
        concise = perfkit.open_profile(write_report(tmp_path / "c.mpiP", 3, sites, style="concise"))
    full, short = pop_metrics(verbose), pop_metrics(concise)
    assert set(full["evidence"].values[0]) <= {"measured", "modelled"}
    lacking = short["evidence"].to_series().unstack()
    assert lacking.loc[:, "load_balance"].item() == "unavailable" and np.isnan(short["load_balance"]).all()
    assert "concise" in str(short["note"].sel(efficiency="load_balance").values[0])
    assert float(short["parallel_efficiency"][0]) == pytest.approx(float(full["parallel_efficiency"][0]), abs=2e-3)


def test_accessor_and_top_level():
    ds = perfkit.open_profile(SYNTH / "48" / "slt.mpinside")
    xr.testing.assert_identical(ds.perf.pop_metrics(), perfkit.pop_metrics(ds))


def _two_ranks_outside_their_totals(replayed: float | None) -> xr.Dataset:
    """Rank 0 computes 2 s and receives 1 s, rank 1 computes 1 s and receives 2 s (late-sender waits measured
    as 0 and 1 s); the elapsed time, 5 s, holds 2 s outside both ranks' 3 s totals (ranks launched apart)."""
    time = {"Compute": [2.0, 1.0], "MPI_Recv": [1.0, 1.0], "w_MPI_Recv": [0.0, 1.0]}
    prof = np.full((2, 3, 6), np.nan)
    prof[:, :, 0] = np.array(list(time.values())).T
    ds = make_run(prof, ranks=range(2), functions=list(time), run={"label": "apart", "nprocs": 2, "elapsed": 5.0})
    return ds if replayed is None else ds.assign(replay_elapsed=("run", [replayed]))


def test_the_replayed_and_the_modelled_ideal_runtime_keep_the_same_time_outside_the_ranks():
    """By hand: T = 5 s; on an ideal network each rank keeps its compute and waits, max(2 + 0, 1 + 1) = 2 s,
    plus the 2 s outside the ranks' totals: T_ideal = 4 s, TrE = 0.8, SerE = 2 / 4. A replay that finds the
    same 2 s over the ranks gives the same 4 s; one that finds 2.5 s gives 4.5 s (TrE 0.9, SerE 2 / 4.5)."""
    modelled = pop_metrics(_two_ranks_outside_their_totals(None)).isel(run=0)
    assert float(modelled["elapsed"]) == 5.0 and float(modelled["ideal_elapsed"]) == pytest.approx(4.0)
    assert float(modelled["transfer_efficiency"]) == pytest.approx(0.8)
    assert float(modelled["serialisation_efficiency"]) == pytest.approx(0.5)
    same = pop_metrics(_two_ranks_outside_their_totals(2.0)).isel(run=0)
    for name in ("ideal_elapsed", "transfer_efficiency", "serialisation_efficiency"):
        assert float(same[name]) == pytest.approx(float(modelled[name])), name
    replayed = pop_metrics(_two_ranks_outside_their_totals(2.5)).isel(run=0)
    assert float(replayed["ideal_elapsed"]) == pytest.approx(4.5)
    assert float(replayed["transfer_efficiency"]) == pytest.approx(0.9)
    assert float(replayed["serialisation_efficiency"]) == pytest.approx(2 / 4.5)
    assert "replaying" in str(replayed["note"].sel(efficiency="transfer_efficiency").item())
