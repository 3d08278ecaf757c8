"""``perfkit.analysis.cpu`` on real ``perfkit collect`` runs (tests/data/cpu) and on built ones."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.cpu import cpu_summary, cpu_usage, has_cpu, host_counts
from tests.analysis.cpu_runs import cpu_run, interfered, oversubscribed, own_cores
from tests.helpers import ROOT

CPU_RUNS = ROOT / "tests" / "data" / "cpu"


def open_cpu(name: str) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # files of the first CPU format lack node_cores_allowed and cpu_quota
        return perfkit.open_profile(str(CPU_RUNS / f"{name}.mpinside"))


def test_busy_ranks_on_shared_cores_waited_what_their_wall_clock_lost():
    """4 busy ranks on 2 cores (tests/collect/programs/busy.c): compute wall - CPU is the run delay (the collector's
    own test holds them within 10 %), the node is oversubscribed 2x, and compute ran on a CPU about a third of its
    wall time (the machine was loaded besides: at most half without other load)."""
    usage = cpu_usage(open_cpu("busy_4ranks_2cores")).isel(run=0)
    np.testing.assert_array_equal(usage["ranks_on_host"], 4)
    np.testing.assert_array_equal(usage["cores"], 2)
    np.testing.assert_array_equal(usage["oversubscription"], 2)
    off = usage["compute_wall"] + usage["mpi_wall"] - usage["compute_cpu"] - usage["mpi_cpu"]
    np.testing.assert_allclose(usage["run_delay"], off, rtol=0.1)
    assert (usage["cpu_availability"] < 0.5).all()
    np.testing.assert_allclose(usage["delay_compute"] + usage["delay_mpi"], usage["run_delay"])
    np.testing.assert_allclose(usage["region"], usage["compute_wall"] + usage["mpi_wall"])


def test_ranks_bound_one_per_core_are_not_oversubscribed():
    """Gromacs, 2 ranks bound one per core (cores_allowed 1) on a loaded machine: the node's cores, not one rank's
    mask, are what its ranks share."""
    for name in ("gromacs_2ranks_2cores_busy_machine", "gromacs_2ranks_2cores_v2"):
        ds = open_cpu(name)
        np.testing.assert_array_equal(ds["rank_cpu"].sel(cpu_stat="cores_allowed"), 1)
        usage = cpu_usage(ds).isel(run=0)
        np.testing.assert_array_equal(usage["cores"], 2)
        np.testing.assert_array_equal(usage["oversubscription"], 1)
        assert float(usage["run_delay"].mean()) > 0.5 * float(usage["region"].mean())


def test_the_least_of_online_cores_node_masks_and_quota_is_the_nodes_cores():
    ds = cpu_run(compute=1.0, compute_cpu=0.5, send=0.1, send_cpu=0.1, run_delay=0.5, hosts=["a"] * 4, cores=8,
                 allowed=1, node_allowed=2)
    assert float(cpu_usage(ds)["cores"].max()) == 2
    quota = ds.copy(deep=True)
    quota["rank_cpu"].loc[{"cpu_stat": "cpu_quota"}] = 1.5
    assert float(cpu_usage(quota)["oversubscription"].max()) == pytest.approx(4 / 1.5)
    unknown = ds.copy(deep=True)
    unknown["rank_cpu"].loc[{"cpu_stat": "node_cores_allowed"}] = np.nan
    assert float(cpu_usage(unknown)["cores"].max()) == 8  # older files: the online cores


def test_without_cpu_everything_is_nan():
    ds = oversubscribed(cpu=False)
    assert not has_cpu(ds)
    usage = cpu_usage(ds)
    assert all(bool(usage[name].isnull().all()) for name in usage.data_vars)
    assert not bool(cpu_summary(usage)["measured"].item())


def test_a_study_mixing_runs_with_and_without_cpu():
    ds = perfkit.combine_runs([oversubscribed(), own_cores(cpu=False), interfered()])
    summary = cpu_summary(cpu_usage(ds))
    assert summary["measured"].values.tolist() == [True, False, True]
    assert summary["oversubscription"].sel(run="oversubscribed").item() == 2
    assert summary["oversubscription"].sel(run="interfered").item() == 0.5
    assert np.isnan(summary["run_delay"].sel(run="own_cores").item())


def test_lazy_cube_gives_the_same_usage(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = perfkit.open_runs(str(CPU_RUNS / "*.mpinside"))
    for suffix in ("zarr", "nc"):
        perfkit.save(ds, tmp_path / f"cpu.{suffix}")
        back = perfkit.load(tmp_path / f"cpu.{suffix}")
        xr.testing.assert_identical(back["rank_cpu"], ds["rank_cpu"])
    lazy = perfkit.load(tmp_path / "cpu.zarr", chunks={"rank": 2})
    assert lazy["profile"].chunks is not None
    xr.testing.assert_allclose(cpu_usage(lazy), cpu_usage(ds))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 10), st.floats(0, 1), st.floats(0.01, 10), st.floats(0, 1),
                          st.floats(0, 1)), min_size=1, max_size=6))
def test_the_delay_split_stays_within_each_parts_time_off_a_core(ranks):
    """Per rank (compute wall, its CPU share, MPI wall, its CPU share, run delay as a share of the time off a core):
    the two parts add up to the run delay, and neither exceeds its part's wall - CPU time."""
    table = np.array(ranks)
    n = len(ranks)
    compute, mpi = table[:, 0], table[:, 2]
    compute_cpu, mpi_cpu = compute * table[:, 1], mpi * table[:, 3]
    delay = table[:, 4] * (compute - compute_cpu + mpi - mpi_cpu)
    ds = cpu_run(compute=1.0, compute_cpu=1.0, send=1.0, send_cpu=1.0, recv=0.0, run_delay=0.0, hosts=["a"] * n,
                 cores=n)
    ds["profile"].loc[{"metric": "time", "function": "Compute"}] = compute[None]
    ds["profile"].loc[{"metric": "cpu_time", "function": "Compute"}] = compute_cpu[None]
    ds["profile"].loc[{"metric": "time", "function": "MPI_Send"}] = mpi[None]
    ds["profile"].loc[{"metric": "cpu_time", "function": "MPI_Send"}] = mpi_cpu[None]
    ds["profile"].loc[{"metric": "time", "function": "w_MPI_Recv"}] = 0.0
    ds["rank_cpu"].loc[{"cpu_stat": "run_delay"}] = delay[None]
    usage = cpu_usage(ds).isel(run=0)
    np.testing.assert_allclose(usage["delay_compute"] + usage["delay_mpi"], delay, atol=1e-12)
    assert (usage["delay_compute"].values <= compute - compute_cpu + 1e-12).all()
    assert (usage["delay_mpi"].values <= mpi - mpi_cpu + 1e-12).all()
    assert (usage["delay_compute"].values >= 0).all() and (usage["delay_mpi"].values >= -1e-12).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["", "n0", "n1", "n2"]), min_size=1, max_size=12), st.integers(1, 4))
def test_ranks_per_host_count_the_ranks_of_each_host(hosts, cores):
    ds = cpu_run(compute=1.0, compute_cpu=1.0, send=0.1, send_cpu=0.1, run_delay=0.0, hosts=hosts, cores=cores)
    usage = cpu_usage(ds).isel(run=0)
    counts = pd.Series(hosts).map(pd.Series(hosts).value_counts())
    known = np.array(hosts) != ""
    np.testing.assert_array_equal(usage["ranks_on_host"].values[known], counts[known])
    assert usage["ranks_on_host"].isnull().values[~known].all()  # no host name, no ppn: unknown
    np.testing.assert_allclose(usage["oversubscription"].values[known], counts[known] / cores)
    distinct = len(set(hosts)) if known.all() else 0
    assert host_counts(ds, np.ones((1, len(hosts)), bool)).tolist() == [distinct]


def test_validate_names_a_broken_rank_cpu():
    ds = oversubscribed()
    assert perfkit.validate(ds) is ds
    with pytest.raises(perfkit.ContractError, match="rank_cpu dims"):
        perfkit.validate(ds.assign(rank_cpu=ds["rank_cpu"].transpose("run", "cpu_stat", "rank")))
    with pytest.raises(perfkit.ContractError, match="cpu_stat_units"):
        perfkit.validate(ds.drop_vars("cpu_stat_units"))
    with pytest.raises(perfkit.ContractError, match="rank_cpu dtype"):
        perfkit.validate(ds.assign(rank_cpu=ds["rank_cpu"].astype(np.float32)))
