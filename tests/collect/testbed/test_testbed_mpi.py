"""MPI across the testbed's nodes: Open MPI and MPICH (C and Fortran) start ranks where they should,
launch files written by ``perfkit place`` put each rank on its node, and the kernel's counters of the
nodes' links agree with the collector's inter-node bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import perfkit
from perfkit.collect.lab import patterns
from perfkit.collect.lab.build import binary, exchange_binary
from perfkit.collect.testbed import Testbed
from perfkit.placement.strategies import place
from perfkit.placement.topology import Topology
from tests.collect.testbed.testbed_support import WHY_NO_MPICH, WHY_NO_OPENMPI, WHY_NO_TESTBED, hosts_reported

pytestmark = [pytest.mark.skipif(WHY_NO_TESTBED is not None, reason=WHY_NO_TESTBED or ""),
              pytest.mark.timeout(600)]
PERFKIT = str(Path(sys.executable).with_name("perfkit"))
MPIS = [pytest.param("openmpi", marks=pytest.mark.skipif(WHY_NO_OPENMPI is not None, reason=WHY_NO_OPENMPI or "")),
        pytest.param("mpich", marks=pytest.mark.skipif(WHY_NO_MPICH is not None, reason=WHY_NO_MPICH or ""))]
COMPILERS = {"openmpi": {"MPICC": "mpicc", "MPIFORT": "mpifort"},
             "mpich": {"MPICC": "mpicc.mpich", "MPIFORT": "mpifort.mpich"}}


def _launch(mpi: str, nprocs: int, program: list[str], *extra: str) -> list[str]:
    if mpi == "openmpi":
        return ["mpirun", "-np", str(nprocs), *extra, *program]
    return ["mpiexec.hydra", "-n", str(nprocs), *extra, *program]


@pytest.fixture
def compilers(monkeypatch, request):
    def use(mpi: str) -> None:
        for name, value in COMPILERS[mpi].items():
            monkeypatch.setenv(name, value)
    return use


@pytest.mark.parametrize("mpi", MPIS)
def test_c_ranks_run_on_their_nodes(mpi, compilers, tmp_path, capfd):
    compilers(mpi)
    pattern = patterns.write_pattern(patterns.ring(8, 4096), tmp_path / "ring.txt")
    with Testbed(4, 2) as tb:
        report = tb.run(_launch(mpi, 8, [str(exchange_binary()), str(pattern), "steps=3", "step=0"]), timeout=180)
    out = capfd.readouterr().out
    assert report["exit_status"] == 0, out
    assert hosts_reported(out) == {r: f"node{r // 2:03d}" for r in range(8)}  # block: 2 slots per node


@pytest.mark.parametrize("mpi", MPIS)
def test_fortran_lab_runs_across_nodes(mpi, compilers, capfd):
    compilers(mpi)
    exe = binary("fortran")
    with Testbed(4, 1) as tb:
        # steps, compute per step [s], extra of the late rank [s], halo bytes, late rank
        report = tb.run(_launch(mpi, 4, [str(exe), "3", "0.001", "0.0", "1024", "0"]), timeout=180)
    assert report["exit_status"] == 0, capfd.readouterr()
    assert sum(n["tx_bytes"] for n in report["nodes"]) > 3 * 4 * 2 * 1024  # the halo crossed the links


@pytest.mark.parametrize("mpi, fmt", [pytest.param("openmpi", "rankfile", marks=MPIS[0].marks),
                                      pytest.param("mpich", "machinefile", marks=MPIS[1].marks)])
def test_launch_files_from_place_put_each_rank_on_its_node(mpi, fmt, compilers, tmp_path, capfd):
    compilers(mpi)
    topology = Topology(nodes=4, cores=2)
    traffic = patterns.shuffled(patterns.stencil((2, 4), 8192), seed=3)
    chosen = place(traffic.astype(float), topology, strategy="random", seed=11)
    launch_file = tmp_path / f"placed.{fmt}"
    chosen.write(fmt, launch_file)
    pattern = patterns.write_pattern(traffic, tmp_path / "pattern.txt")
    extra = ("--rankfile", str(launch_file)) if fmt == "rankfile" else ("-f", str(launch_file))
    with Testbed(4, 2) as tb:
        report = tb.run(_launch(mpi, 8, [str(exchange_binary()), str(pattern), "steps=2", "step=0"], *extra),
                        timeout=180)
    out = capfd.readouterr().out
    assert report["exit_status"] == 0, out
    assert hosts_reported(out) == {r: f"node{n:03d}" for r, n in enumerate(chosen.node)}


@pytest.mark.parametrize("mpi", MPIS)
def test_link_counters_agree_with_the_collectors_inter_node_bytes(mpi, compilers, tmp_path, capfd):
    compilers(mpi)
    traffic = patterns.shuffled(patterns.stencil((4, 2), 256 * 1024), seed=5)
    pattern = patterns.write_pattern(traffic, tmp_path / "pattern.txt")
    profile = tmp_path / "run.mpinside"
    env = {"MPICC": COMPILERS[mpi]["MPICC"], "MPIFORT": COMPILERS[mpi]["MPIFORT"]}
    with Testbed(4, 2, bandwidth="500mbit") as tb:
        report = tb.run([PERFKIT, "collect", "--matrices", "-o", str(profile), "--",
                         *_launch(mpi, 8, [str(exchange_binary()), str(pattern), "steps=8", "step=0"])],
                        env=env, timeout=300)
    out = capfd.readouterr().out
    assert report["exit_status"] == 0, out
    node = np.array([int(h[4:]) for _, h in sorted(hosts_reported(out).items())])
    sent = perfkit.open_profile(profile)["traffic"].sel(quantity="bytes").isel(run=0).values
    collector = float(sent[node[:, None] != node[None, :]].sum())
    assert collector == pytest.approx(traffic[node[:, None] != node[None, :]].sum() * 9)  # warm-up + 8 steps
    wire = sum(n["tx_bytes"] for n in report["nodes"])
    assert wire == pytest.approx(collector, rel=0.02), f"links {wire} B, collector {collector} B"
    assert sum(n["rx_bytes"] for n in report["nodes"]) == pytest.approx(collector, rel=0.02)
