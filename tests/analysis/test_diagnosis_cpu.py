"""``diagnose`` with CPU measured: time without a core named (oversubscription, interference), never blamed on the
network; real ``perfkit collect`` runs (tests/data/cpu, see its PROVENANCE.md) are the ground truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.cpu import cpu_usage
from perfkit.analysis.diagnosis import NO_CORE, diagnose
from perfkit.analysis.pop import pop_metrics
from tests.analysis.cpu_runs import cpu_run, interfered, oversubscribed, own_cores
from tests.analysis.test_cpu import open_cpu

NETWORK = ("faster network", "ideal network", "Network transfer", "interconnect")


def blames_network(found: pd.DataFrame) -> list[str]:
    return [row.title for row in found.itertuples() if any(words in row.text + row.title for words in NETWORK)]


def informative(found: pd.DataFrame) -> pd.DataFrame:
    return found[found["severity"] != "info"].reset_index(drop=True)


@pytest.mark.parametrize("name", ["busy_4ranks_2cores", "gromacs_4ranks_2cores", "gromacs_4ranks_2cores_v2"])
def test_oversubscribed_real_runs_name_the_cores_first_and_never_the_network(name):
    found = informative(diagnose(open_cpu(name)))
    first = found.iloc[0]
    assert first["category"] == "efficiency"
    assert first["title"] == "Largest loss: ranks sharing cores (oversubscription: 4 ranks on a node with 2 cores)"
    assert found.iloc[1]["category"] == "cpu"
    assert found.iloc[1]["lead"].startswith("Ranks 0-3 shared 2 cores: 4 ranks on a node with 2 cores;")
    assert "involuntary context switches" in found.iloc[1]["text"] and "(modelled split)" in found.iloc[1]["text"]
    assert blames_network(found) == []


def test_the_issues_md_code_is_no_longer_a_transfer_problem():
    """GROMACS 4 ranks on 2 cores: the wall-clock split puts 15.3 s of 17.5 s in transfer; the ranks waited 19.2 s per
    rank for a core, 17.4 s of it in compute and transfers (the rest while waiting for other ranks anyway), and no
    transfer or unexplained-wait finding is left once that is left out."""
    found = diagnose(open_cpu("gromacs_4ranks_2cores"))
    assert "transfer 15.3 s" in found["text"][0] and "waited 19.2 s per rank for a core" in found["text"][0]
    assert not found["category"].isin(["transfer", "unexplained_wait"]).any()
    cpu = found[found["category"] == "cpu"].iloc[0]
    assert cpu["seconds"] == pytest.approx(17.4, abs=0.05)
    assert "At stake: 17.4 s per rank" in cpu["text"]
    assert "other load took the cores too" in cpu["text"]  # 19.2 s against at most 10.4 s from sharing alone


@pytest.mark.parametrize("name", ["gromacs_2ranks_2cores_busy_machine", "gromacs_2ranks_2cores_v2"])
def test_ranks_with_a_core_each_on_a_loaded_machine_is_interference(name):
    """GROMACS, 2 ranks bound one per core on a loaded machine: interference, not oversubscription (the first
    file has no node_cores_allowed: the online cores; the second states the node's 2)."""
    found = diagnose(open_cpu(name))
    assert found["title"][0].startswith("Largest loss: ranks without a core (interference")
    cpu = found[found["category"] == "cpu"]
    assert cpu["title"].tolist() == ["Interference: ranks without a core"]
    assert "Oversubscription" not in " ".join(found["title"]) and blames_network(found) == []


def test_two_ranks_on_two_quiet_cores_have_no_cores_finding():
    found = diagnose(own_cores())
    assert "cpu" not in set(found["category"])
    assert "sharing cores" not in found["title"][0]
    unexplained = found[found["category"] == "unexplained_wait"]["text"].item()
    assert "The ranks had their cores when it mattered: waiting for one cost them" in unexplained
    assert blames_network(found) == []  # one host: shared memory


def test_interference_is_named_with_the_involuntary_switches():
    found = diagnose(interfered())
    cpu = found[found["category"] == "cpu"].iloc[0]
    assert cpu["title"] == "Interference: ranks without a core"
    assert "400 involuntary context switches per rank" in cpu["text"]
    usage = cpu_usage(interfered()).isel(run=0)  # at stake: all but the delay while waiting (0.05 s per rank)
    waiting = usage["delay_mpi"] * 0.05 / usage["mpi_wall"]
    assert cpu["seconds"] == pytest.approx(float((usage["run_delay"] - waiting).mean()))
    assert 0.55 < cpu["seconds"] < 0.6
    assert found["title"][0].startswith("Largest loss: ranks without a core (interference")


def test_transfer_and_waits_leave_the_time_without_a_core_out_and_say_so():
    ds = oversubscribed(send=2.4, send_cpu=0.9, run_delay=2.1)
    with_cpu = diagnose(ds)
    pop = pop_metrics(ds)
    transfer = with_cpu[with_cpu["category"] == "transfer"].iloc[0]
    loss = float(pop["elapsed"][0] - pop["ideal_elapsed"][0])
    assert transfer["seconds"] < loss
    assert "ranks waiting for a core" in transfer["text"] and "left out here" in transfer["text"]
    assert transfer["title"] == "Shared-memory transfer time"
    without = diagnose(oversubscribed(send=2.4, send_cpu=0.9, run_delay=2.1, cpu=False))
    assert without[without["category"] == "transfer"]["seconds"].item() == pytest.approx(loss)


def test_several_nodes_each_oversubscribed():
    ds = oversubscribed(hosts=["n0"] * 4 + ["n1"] * 4)
    found = diagnose(ds)
    assert "ranks sharing cores (oversubscription: 4 ranks on a node (2 of 2 nodes alike) with 2 cores)" in \
        found["title"][0]
    assert found[found["category"] == "cpu"]["lead"].item().startswith("Ranks 0-7 shared 2 cores")


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 0.2))
def test_the_noise_floor(share):
    """Run delay below ``NO_CORE`` of elapsed is a quiet machine's: no finding, nothing left out; above it, named."""
    ds = own_cores(run_delay=0.0)
    elapsed = float(pop_metrics(ds)["elapsed"][0])
    ds["rank_cpu"].loc[{"cpu_stat": "run_delay"}] = share * elapsed
    ds["profile"].loc[{"metric": "cpu_time", "function": "Compute"}] = \
        ds["profile"].sel(metric="time", function="Compute") - share * elapsed
    found = diagnose(ds)
    named = "cpu" in set(found["category"])
    assert named == (share * elapsed >= NO_CORE * elapsed)
    assert ("left out here" in " ".join(found["text"])) == (named and share > 0)


def test_without_cpu_a_shared_node_says_cpu_was_not_measured():
    found = diagnose(oversubscribed(cpu=False))
    assert found["title"][0].startswith("Largest loss: shared-memory transfer")
    assert "CPU was not measured" in found["text"][0]
    assert "CPU was not measured" in found[found["category"] == "transfer"]["text"].item()
    assert blames_network(found) == []


def test_without_hosts_or_cpu_the_network_finding_is_as_before():
    ds = oversubscribed(cpu=False).drop_vars("host")
    found = diagnose(ds)
    assert found["title"][0].startswith("Largest loss: transfer (transfer efficiency")
    assert "A faster network" in found["text"][0] and "CPU was not measured" not in " ".join(found["text"])
    assert found[found["category"] == "transfer"]["title"].item() == "Network transfer time"


def test_pop_states_useful_compute_as_cpu_and_wall_time():
    pop = pop_metrics(perfkit.combine_runs([oversubscribed(), own_cores(cpu=False)]))
    assert float(pop["useful_cpu_mean"].sel(run="oversubscribed")) == pytest.approx(1.0)
    assert float(pop["useful_mean"].sel(run="oversubscribed")) == pytest.approx(2.0)
    assert float(pop["cpu_availability"].sel(run="oversubscribed")) == pytest.approx(0.5)
    assert np.isnan(float(pop["cpu_availability"].sel(run="own_cores")))
    assert "cpu_availability" not in pop_metrics(own_cores(cpu=False))


def test_lazy_cube_gives_the_same_cpu_findings(tmp_path):
    ds = perfkit.combine_runs([oversubscribed(), interfered(), own_cores()])
    perfkit.save(ds, tmp_path / "cpu.zarr")
    lazy = perfkit.load(tmp_path / "cpu.zarr", chunks={"run": 1})
    pd.testing.assert_frame_equal(diagnose(lazy), diagnose(ds))


def test_a_quota_of_cores_below_the_ranks_is_oversubscription():
    ds = cpu_run(compute=2.0, compute_cpu=1.0, send=0.2, send_cpu=0.2, run_delay=1.0, hosts=["n0"] * 3, cores=8)
    ds["rank_cpu"].loc[{"cpu_stat": "cpu_quota"}] = 1.5
    cpu = diagnose(ds).query("category == 'cpu'").iloc[0]
    assert cpu["title"] == "Oversubscription: 3 ranks on a node with 1.5 cores"


def test_transfers_too_slow_with_cores_to_spare_are_not_blamed_on_sharing():
    """Slow transfers (1 MB/s) are what ranks without a core look like; with CPU measured and no run delay to speak
    of, the summary says it is not that either."""
    found = diagnose(own_cores(nbytes=1e5))
    assert found["title"][0].endswith("(transfer efficiency 0.84); not the network")
    assert "Yet waiting for a core cost only 5.80 ms per rank (run delay 6.00 ms, measured)" in found["text"][0]
    without = diagnose(own_cores(nbytes=1e5, cpu=False))
    assert without["title"][0].endswith("ranks sharing cores or interference, not the network")
    assert "CPU was not measured" in without["text"][0]


def test_a_late_sender_may_be_a_rank_without_a_core():
    found = diagnose(oversubscribed(wait=0.5))
    wait = found[found["category"] == "wait_late_sender"]["text"].item()
    assert "The ranks also waited 993 ms per rank for a core in their compute" in wait
    assert "for a core" not in diagnose(oversubscribed(wait=0.5, cpu=False)).query(
        "category == 'wait_late_sender'")["text"].item()
