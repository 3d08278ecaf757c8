"""The replay of real traces against a truth it does not share: lab runs traced across 4 testbed nodes.

Each bundled lab run (``data/lab/traces``) kept the compute intervals its ranks recorded. The lab's
zero-cost model run on those compute durations, MPI costing nothing and messages arriving at once,
is the run on POP's ideal network (``lab.truth(..., ideal_network=True)``): an event simulation of the
program's own dependencies, independent of the trace's events and of how the replay finds its longest
path. POP's serialisation efficiency (``max_r C_r / T_ideal``) from replaying the trace must equal it.
"""

from __future__ import annotations

import json

import pytest

import perfkit
from perfkit.analysis.pop import pop_metrics
from perfkit.collect import lab
from tests.helpers import ROOT

TRACES = ROOT / "data" / "lab" / "traces"
RUNS = json.loads((TRACES / "runs.json").read_text())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_replayed_serialisation_efficiency_equals_the_ideal_network_truth(name):
    run = RUNS[name]
    intervals = lab.read_record(TRACES / name.replace(".mpinside", ".compute"), run["nprocs"])
    truth = lab.truth(run["scenario"], run["nprocs"], realised=intervals, ideal_network=True, **run["parameters"])
    compute, ideal = truth["compute_time"].values, float(truth["end"].max())
    pop = pop_metrics(perfkit.open_profile(TRACES / f"{name}.otf2")).isel(run=0)
    assert float(pop["serialisation_efficiency"]) == pytest.approx(compute.max() / ideal, abs=0.03)
    assert float(pop["ideal_elapsed"]) == pytest.approx(ideal, rel=0.03)
    # the trace's compute is the program's own as recorded, within 1.5 ms per step: the Compute region also
    # holds the program's code around its sleep and, on a loaded machine, its late wake-ups
    trace_compute = perfkit.open_profile(TRACES / f"{name}.otf2")["profile"].sel(function="Compute", metric="time")
    assert trace_compute.isel(run=0).values == pytest.approx(compute, abs=1.5e-3 * run["parameters"]["steps"])


def test_the_ideal_network_truth_is_not_the_run_itself():
    """Without ``ideal_network`` the truth keeps when each compute ended: the run's real delays, longer."""
    name = "pipeline-np8.mpinside"
    run = RUNS[name]
    intervals = lab.read_record(TRACES / name.replace(".mpinside", ".compute"), run["nprocs"])
    ideal = lab.truth(run["scenario"], 8, realised=intervals, ideal_network=True, **run["parameters"])
    real = lab.truth(run["scenario"], 8, realised=intervals, **run["parameters"])
    assert float(ideal["end"].max()) < 0.95 * float(real["end"].max())
    assert ideal.attrs["basis"] == "realised, ideal network" and real.attrs["basis"] == "realised"


def test_whatif_perfect_network_on_a_trace_is_its_replay():
    """A trace answers ``perfect_network`` by its replay (one number, no interval); the profile of the same run
    by the model (an interval). Combined, each run keeps its own basis."""
    name = "pipeline-np8.mpinside"
    run = RUNS[name]
    trace = perfkit.open_profile(TRACES / f"{name}.otf2")
    profile = perfkit.open_profile(TRACES / name)
    both = perfkit.combine_runs([trace, profile], labels=["trace", "profile"])
    result = perfkit.whatif(both, "perfect_network")
    assert result["basis"].values.tolist() == ["replayed", "modelled"]
    pop = pop_metrics(trace).isel(run=0)
    got = result.sel(run="trace")
    replays = trace["replay_network"].isel(run=0)
    assert float(got["saving"]) == pytest.approx(float(replays.sel(transfer_scale=1.0) - replays.sel(transfer_scale=0)))
    assert float(got["speedup_low"]) == float(got["speedup"]) == float(got["speedup_high"])
    assert float(got["after"].sel(kind="transfer").max()) == 0.0
    # and it is the ideal-network truth's saving, within 3% of the run
    intervals = lab.read_record(TRACES / name.replace(".mpinside", ".compute"), run["nprocs"])
    truth = lab.truth(run["scenario"], 8, realised=intervals, ideal_network=True, **run["parameters"])
    ideal = float(truth["end"].max())
    assert float(got["saving"]) == pytest.approx(float(pop["elapsed"]) - ideal, abs=0.03 * float(pop["elapsed"]))
    modelled = result.sel(run="profile")
    assert float(modelled["speedup_low"]) < float(modelled["speedup_high"])


@pytest.mark.parametrize(("name", "saves"), [("dynamic_imbalance-np8.mpinside", False),
                                             ("pipeline-np8.mpinside", False),
                                             ("collective_imbalance-np8.mpinside", True)])
def test_whatif_balance_on_a_trace_tells_static_from_dynamic_imbalance(name, saves):
    """Balancing the ranks' compute totals saves nothing where every rank is late in turn (dynamic imbalance)
    or waits in turn (a pipeline), and saves where the same ranks compute more every step; the profile's
    model can only give a range from nothing to much for all three."""
    trace = perfkit.whatif(perfkit.open_profile(TRACES / f"{name}.otf2"), "balance").isel(run=0)
    profile = perfkit.whatif(perfkit.open_profile(TRACES / name), "balance").isel(run=0)
    assert str(trace["basis"].values) == "replayed" and str(profile["basis"].values) == "modelled"
    elapsed = float(trace["elapsed_before"])
    if saves:
        assert float(trace["saving"]) > 0.05 * elapsed
    else:
        assert abs(float(trace["saving"])) < 0.005 * elapsed
    assert float(profile["speedup_high"]) > 1.1 and float(profile["speedup_low"]) < 1.05


def test_whatif_network_between_replayed_speeds_is_bounded_by_convexity():
    """k = 3 lies between the replays at 2 and 4 times faster: its runtime at or below their chord."""
    ds = perfkit.open_profile(TRACES / "pipeline-np8.mpinside.otf2")
    at = {k: perfkit.whatif(ds, "network", k).isel(run=0) for k in (2, 3, 4)}
    assert float(at[2]["speedup"]) < float(at[3]["speedup_low"]) <= float(at[3]["speedup"])
    assert float(at[3]["speedup"]) <= float(at[3]["speedup_high"]) < float(at[4]["speedup"])
    assert str(at[3]["basis"].values) == "replayed"
    slower = perfkit.whatif(ds, "network", 0.5).isel(run=0)  # a slower network is not replayed
    assert str(slower["basis"].values) == "modelled"
