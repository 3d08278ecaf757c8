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
    assert float(got["saving"]) == pytest.approx(float(pop["elapsed"] - pop["ideal_elapsed"]), rel=1e-9)
    assert float(got["speedup_low"]) == float(got["speedup"]) == float(got["speedup_high"])
    assert float(got["after"].sel(kind="transfer").max()) == 0.0
    # and it is the ideal-network truth's saving, within 3% of the run
    intervals = lab.read_record(TRACES / name.replace(".mpinside", ".compute"), run["nprocs"])
    truth = lab.truth(run["scenario"], 8, realised=intervals, ideal_network=True, **run["parameters"])
    ideal = float(truth["end"].max())
    assert float(got["saving"]) == pytest.approx(float(pop["elapsed"]) - ideal, abs=0.03 * float(pop["elapsed"]))
    modelled = result.sel(run="profile")
    assert float(modelled["speedup_low"]) < float(modelled["speedup_high"])
