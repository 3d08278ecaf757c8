"""The collector at scale: all-to-alls with a count per pair over 64 oversubscribed ranks against the truth the
program computes itself (point to point and ``collective_bytes``), through the whole chain (library, MPI-IO
output, MPInside file, ``perfkit.open_profile``); sparse traffic kept sparse through the written file.

256 ranks take minutes on 2 cores: ``benchmarks/bench_collector.py --scale-only`` runs 64, 128 and 256.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sparse
import xarray as xr

import perfkit
from perfkit.collect import collect
from perfkit.collect.launch import mpirun_command
from perfkit.collect.raw import ROW, VERSION, read_raw
from perfkit.collect.run import _write_atomically
from perfkit.model import COLLECTIVE_BYTES, make_run

PROGRAM = Path(__file__).parent / "programs" / "alltoallv.c"
NO_MPI = next((f"{tool} not on PATH" for tool in ("mpicc", "mpirun") if shutil.which(tool) is None), None)
NO_MPICH = next((f"{tool} not on PATH (Debian: apt install mpich libmpich-dev)"
                 for tool in ("mpicc.mpich", "mpiexec.mpich") if shutil.which(tool) is None), None)


def truth(path: Path, nranks: int) -> dict[str, np.ndarray]:
    """The program's own (sender, receiver) bytes: point to point (``bytes``) and ``collective_bytes``."""
    out = {"bytes": np.zeros((nranks, nranks)), COLLECTIVE_BYTES: np.zeros((nranks, nranks))}
    for line in path.read_text().splitlines():
        kind, i, j, value = line.split()
        out["bytes" if kind == "p2p" else COLLECTIVE_BYTES][int(i), int(j)] = float(value)
    return out


def run_program(tmp_path: Path, nranks: int, cc: str, launch: list[str]) -> tuple[xr.Dataset, Path]:
    exe, truth_file = tmp_path / "alltoallv", tmp_path / "truth.txt"
    subprocess.run([cc, "-O2", str(PROGRAM), "-o", str(exe)], check=True)
    result = collect([*launch, str(exe), str(truth_file)], tmp_path / "a2a.mpinside", matrices=True, timeout=300)
    assert result.returncode == 0 and result.output is not None, result.message
    return perfkit.open_profile(result.output), truth_file


def check_against_truth(ds, truth_file: Path, nranks: int) -> None:
    expected = truth(truth_file, nranks)
    traffic = ds["traffic"].isel(run=0)
    assert list(ds["quantity"].values) == ["bytes", "count", "time", COLLECTIVE_BYTES]
    for quantity, want in expected.items():
        got = traffic.sel(quantity=quantity).data
        got = got.todense() if hasattr(got, "todense") else np.asarray(got)
        np.testing.assert_array_equal(got, want, err_msg=quantity)
    # one Sendrecv per pair of the ring; the collectives' bytes leave the message counts alone
    np.testing.assert_array_equal(traffic.sel(quantity="count").values, (expected["bytes"] > 0) * 1.0)
    # each rank's bytes received by MPI_Alltoallv (3 calls of ints) and MPI_Alltoallw (ints or doubles by the
    # pair) in the profile, from the program's counts; with the Allgather on a communicator of the ranks of one
    # parity (freed before MPI_Finalize) and the Bcast's 5 doubles they make collective_bytes
    i, j = np.meshgrid(np.arange(nranks), np.arange(nranks), indexing="ij")
    count = np.where(i != j, 1 + (7 * i + 3 * j) % 11, 0)
    profile = ds["profile"].isel(run=0)
    per_call = {"MPI_Alltoallv": 3 * 4 * count, "MPI_Alltoallw": count * np.where((i + j) % 2, 8, 4)}
    for call, pairs in per_call.items():
        np.testing.assert_array_equal(profile.sel(function=call, metric="bytes_recv").values, pairs.sum(axis=0))
    np.testing.assert_array_equal(profile.sel(function="MPI_Allgather", metric="bytes_recv").values,
                                  8 * ((nranks - 1 - np.arange(nranks) % 2) // 2))  # from its parity's others
    others = {"MPI_Allgather": np.where((i != j) & (i % 2 == j % 2), 8, 0), "MPI_Bcast": np.zeros((nranks, nranks))}
    others["MPI_Bcast"][0, 1:] = 5 * 8
    np.testing.assert_array_equal(sum(per_call.values()) + sum(others.values()), expected[COLLECTIVE_BYTES])


@pytest.mark.skipif(NO_MPI is not None, reason=f"MPI: {NO_MPI}")
def test_alltoallv_over_64_oversubscribed_ranks_equals_the_programs_truth(tmp_path):
    launch = mpirun_command(64, [])
    launch[1:1] = ["--mca", "mpi_yield_when_idle", "1"]  # 64 ranks on 2 cores: yield while polling
    ds, truth_file = run_program(tmp_path, 64, "mpicc", launch)
    check_against_truth(ds, truth_file, 64)


@pytest.mark.skipif(NO_MPICH is not None, reason=f"MPICH: {NO_MPICH}")
def test_alltoallv_with_mpich_equals_the_programs_truth(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICC", "mpicc.mpich")
    monkeypatch.setenv("MPIFORT", "mpifort.mpich")
    ds, truth_file = run_program(tmp_path, 24, "mpicc.mpich", ["mpiexec.mpich", "-np", "24"])
    check_against_truth(ds, truth_file, 24)


def _raw_ring(path: Path, nranks: int) -> Path:
    """Collector output of a ring: rank r received 8r bytes in 2 messages and 4r + 1 collective bytes from r - 1."""
    rows = np.zeros((2 * nranks, ROW))
    rows[:nranks, :6] = np.c_[np.zeros(nranks), np.arange(nranks), -np.ones(nranks), np.zeros(nranks),
                              np.ones(nranks), np.zeros(nranks)]
    r = np.arange(nranks)
    rows[nranks:, :8] = np.c_[2 * np.ones(nranks), r, (r - 1) % nranks, np.zeros(nranks), 8.0 * r, 2 * np.ones(nranks),
                              0.5 * np.ones(nranks), 4.0 * r + 1]
    header = (f"perfkit-collect {VERSION}\nranks {nranks}\nfunctions 1\nMPI_Send 0\n"
              f"options slt=0 collective_wait=0 matrices=1\nrows {len(rows)}\nhost_width 8\ndata\n")
    path.write_bytes(header.encode() + rows.tobytes() + b"node\0\0\0\0" * nranks + b"end\n")
    return path


def test_sparse_traffic_stays_sparse_through_the_written_profile(tmp_path):
    """20,000 ranks in a ring: the collector's records -> sparse traffic -> MPInside file -> the same sparse
    traffic, collective bytes included (an N x N array would be 12.8 GB). Without the size histograms, whose
    tables the MPInside file holds rank by rank (slow at this many ranks, and not what this test is about)."""
    n = 20_000
    ds = read_raw(_raw_ring(tmp_path / "raw", n), label="ring").drop_vars(["sizes", "size_bin", "stat"])
    assert isinstance(ds["traffic"].data, sparse.COO)
    _write_atomically(ds, tmp_path / "ring.mpinside")
    assert "COLLECTIVE_SIZE(i,j)" in (tmp_path / "ring.mpinside").read_text()
    back = perfkit.open_profile(tmp_path / "ring.mpinside")
    assert isinstance(back["traffic"].data, sparse.COO)
    a, b = ds["traffic"].data, back["traffic"].data
    assert list(back["quantity"].values) == list(ds["quantity"].values)
    np.testing.assert_array_equal(a.coords, b.coords)
    np.testing.assert_allclose(a.data, b.data, rtol=0, atol=5e-7)  # TIME is written with 6 decimals


def test_a_profile_without_collective_bytes_writes_no_collective_matrix(tmp_path):
    traffic = np.zeros((2, 2, 3))
    traffic[0, 1] = (8, 1, 0.5)
    ds = make_run(np.ones((2, 1, 6)), ranks=[0, 1], functions=["MPI_Send"], traffic=traffic,
                  run={"nodes": 1, "ppn": 2, "mode": "basic"})
    _write_atomically(ds, tmp_path / "p2p.mpinside")
    assert "COLLECTIVE_SIZE" not in (tmp_path / "p2p.mpinside").read_text()
    assert list(perfkit.open_profile(tmp_path / "p2p.mpinside")["quantity"].values) == ["bytes", "count", "time"]
