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
