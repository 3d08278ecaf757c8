"""The collector's wrappers on a program with known counts, bytes and one late sender; its command; its output.

The late sender's 50 ms is checked within 2.5 ms (a collector mis-timing by 10 % fails), unless the
scheduling noise around the run (``perfkit.collect.lab.noise``) takes more than its share of that.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sparse
import xarray as xr

import perfkit
from perfkit import atomic
from perfkit.cli import main
from perfkit.collect import collect
from perfkit.collect.generate import c_source, fortran_source, function_ids
from perfkit.collect.launch import mpirun_command
from perfkit.collect.raw import ROW, VERSION, RawCollectorError, read_raw
from perfkit.collect.run import _write_atomically
from perfkit.collect.signatures import SIGNATURES
from perfkit.model import COLLECTIVE_BYTES
from tests.helpers import skip_when_noisy, with_noise

PROGRAMS = Path(__file__).parent / "programs"
#: How close the late sender's wait and compute must be to the 50 ms it sleeps [s].
LATE_TOLERANCE = 0.0025
NO_MPI = next((f"{tool} not on PATH" for tool in ("mpicc", "mpirun") if shutil.which(tool) is None), None)
needs_mpi = pytest.mark.skipif(NO_MPI is not None, reason=f"MPI: {NO_MPI} (Debian: apt install openmpi-bin "
                                                          "libopenmpi-dev; ./dev test installs it when root)")


def test_every_signature_has_a_c_and_a_fortran_wrapper():
    c, f = c_source(), fortran_source()
    for sig in SIGNATURES:
        assert f"int MPI_{sig.name}({sig.params})" in c
        assert f"PMPI_{sig.name}(" in c
        lower = sig.name.lower()
        assert f"void mpi_{lower}_(" in f and f"pmpi_{lower}_(" in f
        for alias in (f"mpi_{lower}__", f"mpi_{lower}", f"MPI_{sig.name.upper()}"):
            assert f"void {alias}(" in f
    assert list(function_ids())[:2] == ["Init", "Init_thread"]


@pytest.fixture(scope="module")
def coverage_run(tmp_path_factory) -> tuple[xr.Dataset, float]:
    """The coverage program's profile and the scheduling noise around its run [s per step]."""
    if NO_MPI:
        pytest.skip(NO_MPI)
    work = tmp_path_factory.mktemp("coverage")
    subprocess.run(["mpicc", "-O2", str(PROGRAMS / "coverage.c"), "-o", str(work / "coverage")], check=True)
    result, noise = with_noise(lambda: collect(mpirun_command(4, [str(work / "coverage")]),
                                               work / "coverage.mpinside", slt=True, collective_wait=True,
                                               matrices=True, timeout=120))
    assert result.returncode == 0 and result.output is not None, result.message
    return perfkit.open_profile(result.output), noise


@pytest.fixture
def coverage_profile(coverage_run) -> xr.Dataset:
    return coverage_run[0]


def _table(ds, metric: str, function: str) -> list[float]:
    return ds["profile"].isel(run=0).sel(metric=metric, function=function).values.tolist()


@needs_mpi
def test_calls_and_bytes_of_every_exercised_wrapper_are_exact(coverage_profile):
    ds = coverage_profile
    perfkit.validate(ds)
    assert ds["mode"].item() == "slt+collective_wait" and ds["format"].item() == "mpinside"
    assert int(ds["nodes"].item()) == 1 and int(ds["ppn"].item()) == 4
    # persistent requests: 3 Startall rounds of 256 doubles, attributed to the calls that set them up
    assert _table(ds, "bytes_sent", "MPI_Send_init") == [6144] * 4
    assert _table(ds, "calls_recv", "MPI_Recv_init") == [3] * 4
    assert _table(ds, "calls", "MPI_Startall") == [3] * 4
    # Irecv completed by Waitany, Waitsome and a Test loop: 1 + 2 + 3 doubles
    assert _table(ds, "bytes_recv", "MPI_Irecv") == [48] * 4
    assert _table(ds, "calls", "MPI_Waitany") == [2] * 4
    # Ssend / Probe / Recv of 5 doubles between the pairs; the late 16-double send to rank 0 and 2
    assert _table(ds, "bytes_sent", "MPI_Ssend") == [40, 0, 40, 0]
    assert _table(ds, "bytes_recv", "MPI_Recv") == [128, 40, 128, 40]
    assert _table(ds, "calls", "MPI_Probe") == [0, 1, 0, 1]
    assert _table(ds, "bytes_sent", "MPI_Sendrecv_replace") == [32] * 4
    # collectives: Bcast of 64 B from 0, Gather of 4 B to 3, Alltoall of 8 B to each other rank
    assert _table(ds, "bytes_sent", "MPI_Bcast") == [192, 0, 0, 0]
    assert _table(ds, "bytes_recv", "MPI_Bcast") == [0, 64, 64, 64]
    assert _table(ds, "bytes_recv", "MPI_Gather") == [0, 0, 0, 12]
    assert _table(ds, "bytes_sent", "MPI_Alltoall") == [24] * 4
    for call in ("MPI_Bcast", "MPI_Gather", "MPI_Alltoall"):
        assert _table(ds, "calls", "b_" + call) == [1] * 4
    assert _table(ds, "calls", "MPI_Comm_split") == [1] * 4


@needs_mpi
def test_point_to_point_matrices_are_exact(coverage_profile):
    traffic = coverage_profile["traffic"].isel(run=0)
    # per pair: 3 x 2048 B persistent, 8 + 16 + 24 B Irecv, 32 B Sendrecv_replace, and 40 B (even -> odd)
    # or 128 B (odd -> even, the late send on the split communicator, translated to world ranks)
    expected = np.zeros((4, 4))
    expected[0, 1] = expected[2, 3] = 6144 + 48 + 32 + 40
    expected[1, 0] = expected[3, 2] = 6144 + 48 + 32 + 128
    np.testing.assert_array_equal(traffic.sel(quantity="bytes").values, expected)
    np.testing.assert_array_equal(traffic.sel(quantity="count").values, (expected > 0) * 8.0)


@needs_mpi
def test_a_late_sender_on_a_split_communicator_is_send_late_time_with_any_source(coverage_run):
    profile, noise = coverage_run
    skip_when_noisy(noise, LATE_TOLERANCE)  # one late send: the run is one step
    w = _table(profile, "time", "w_MPI_Recv")
    assert w[0] == pytest.approx(0.05, abs=LATE_TOLERANCE)  # rank 1 sleeps 50 ms before sending to rank 0
    assert max(w[1:]) < LATE_TOLERANCE
    compute = _table(profile, "time", "Compute")
    assert compute[1] == pytest.approx(0.05, abs=LATE_TOLERANCE)


@needs_mpi
def test_the_command_returns_the_program_status_and_writes_nothing_without_finalize(tmp_path, capsys):
    src = tmp_path / "exit.c"
    src.write_text('#include <mpi.h>\n#include <stdlib.h>\nint main(int c, char **v) { MPI_Init(&c, &v);\n'
                   "  if (c > 1) exit(3);\n  MPI_Finalize(); return 0; }\n")
    subprocess.run(["mpicc", str(src), "-o", str(tmp_path / "exit")], check=True)
    out = tmp_path / "run.mpinside"
    status = main(["collect", "-o", str(out), "--", *mpirun_command(2, [str(tmp_path / "exit"), "fail"])])
    assert status != 0 and not out.exists()
    assert "did not reach MPI_Finalize" in capsys.readouterr().err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind
    assert main(["collect", "-o", str(out), "--", *mpirun_command(2, [str(tmp_path / "exit")])]) == 0
    assert out.exists() and perfkit.open_profile(out)["mode"].item() == "basic"
    assert "wrote" in capsys.readouterr().err


def test_help_explains_every_option_with_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["collect", "--help"])
    text = capsys.readouterr().out
    for option in ("-o OUT", "--slt", "--collective-wait", "--matrices", "--timeout"):
        assert option in text
    assert "perfkit collect -o run.mpinside --slt --collective-wait --matrices -- mpirun -np 4 ./app" in text


def test_nothing_to_launch_is_an_error(tmp_path, capsys):
    assert main(["collect", "-o", str(tmp_path / "x"), "--"]) == 1
    assert "nothing to launch" in capsys.readouterr().err


def _raw_file(path: Path, rows: list[list[float]], hosts: list[str], *, functions: str = "MPI_Send 0\n",
              matrices: int = 0, trailer: bytes = b"finalize_seconds 0.01\nend\n", version: str = VERSION,
              cpu: int = 0) -> Path:
    """Collector output as the library writes it: header, records (padded to ROW values with NaN), NUL-padded host
    names, trailer."""
    width = 16
    header = (f"perfkit-collect {version}\nranks {len(hosts)}\nfunctions 1\n{functions}"
              f"options slt=0 collective_wait=0 matrices={matrices} cpu={cpu}\nrows {len(rows)}\n"
              f"host_width {width}\ndata\n")
    names = b"".join(h.encode().ljust(width, b"\0") for h in hosts)
    records = np.array([[*row, *[np.nan] * (ROW - len(row))] for row in rows], dtype=np.float64)
    path.write_bytes(header.encode() + records.tobytes() + names + trailer)
    return path


def test_a_damaged_collector_output_is_refused(tmp_path):
    rows = [[0, r, -1, 0, 1.0, 0, 0, 0, 0, 0] for r in range(2)]
    good = _raw_file(tmp_path / "raw", rows, ["a", "a"])
    assert read_raw(good).attrs["collect_finalize_s"] == 0.01
    cut = tmp_path / "cut"
    cut.write_bytes(good.read_bytes()[:-60])  # a rank's records and the hosts missing
    with pytest.raises(RawCollectorError, match="records where the header announces 2"):
        read_raw(cut)
    with pytest.raises(RawCollectorError, match="trailer"):
        read_raw(_raw_file(tmp_path / "raw", rows, ["a", "a"], trailer=b"finalize_seconds 0.01\n"))
    with pytest.raises(RawCollectorError, match="line 1: collector output version"):
        read_raw(_raw_file(tmp_path / "raw", rows, ["a", "a"], version="2"))


def test_partner_records_become_sparse_traffic_with_collective_bytes(tmp_path):
    """5,000 ranks in a ring (point to point to the next, an all-to-all's bytes from the previous): sparse.COO,
    never an N x N array, each value where the records put it."""
    n = 5000
    rows = [[0, r, -1, 0, 1.0, 0, 0, 0, 0, 0] for r in range(n)]
    rows += [[2, r, (r - 1) % n, 0, 8.0 * r, 2, 0.5, 4.0 * r + 1, 0, 0] for r in range(n)]
    ds = read_raw(_raw_file(tmp_path / "raw", rows, ["h"] * n, matrices=1))
    traffic = ds["traffic"].isel(run=0)
    assert isinstance(traffic.data, sparse.COO) and list(ds["quantity"].values)[-1] == COLLECTIVE_BYTES
    assert traffic.data.nnz == n * 4 - 1  # rank 0 received 0 point-to-point bytes from rank n - 1
    senders = (np.arange(n) - 1) % n
    for q, expected in (("bytes", 8.0 * np.arange(n)), ("count", 2), ("collective_bytes", 4.0 * np.arange(n) + 1)):
        np.testing.assert_array_equal(traffic.sel(quantity=q).data[senders, np.arange(n)].todense(), expected)
    assert traffic.sel(quantity="bytes").data.sum() == 8.0 * np.arange(n).sum()


def test_the_written_profile_keeps_each_ranks_host(tmp_path):
    """Collector output of 3 ranks on 2 hosts (MPI_Send on every rank) -> the MPInside file -> host per rank."""
    rows = [[0, r, -1, 0, 1.0 + r, 0, 0, 0, 0, 0] for r in range(3)]
    rows += [[0, r, 0, 0, 0.5, 10, 80, 10, 0, 0] for r in range(3)]
    raw = _raw_file(tmp_path / "raw", rows, ["node-a", "node-a", "node-b.example"], functions="MPI_Send 7\n")
    ds = read_raw(raw, label="run")
    assert ds["host"].isel(run=0).values.tolist() == ["node-a", "node-a", "node-b.example"]
    _write_atomically(ds, tmp_path / "run.mpinside")
    assert '"hosts": [["node-a", 2], "node-b.example"]' in (tmp_path / "run.mpinside").read_text()
    back = perfkit.open_profile(tmp_path / "run.mpinside")
    np.testing.assert_array_equal(back["host"].values, ds["host"].values)
    assert back["nodes"].item() == 2 and np.isnan(back["ppn"].item())


@needs_mpi
def test_a_real_runs_hosts_are_read_back(coverage_profile):
    """One machine: every rank on the host MPI names, which is also the run's system."""
    hosts = coverage_profile["host"].isel(run=0).values.tolist()
    assert len(hosts) == 4 and hosts[0] and set(hosts) == {coverage_profile["system"].item()}


def test_an_existing_out_is_refused_before_the_launch_without_force(tmp_path, capsys):
    out, ran = tmp_path / "run.mpinside", tmp_path / "ran"
    out.write_text("an earlier profile\n")
    launch = ["sh", "-c", f"touch {ran}"]
    assert main(["collect", "-o", str(out), "--", *launch]) == 1
    assert capsys.readouterr().err == f"perfkit collect: error: {out} exists; --force replaces it\n"
    with pytest.raises(FileExistsError, match="overwrite=True replaces it"):
        collect(launch, out)
    assert not ran.exists() and out.read_text() == "an earlier profile\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("case", ["folder", "the program", "an input of the program", "trace not an archive"])
def test_an_output_that_cannot_be_written_is_refused_before_the_launch_in_one_line(case, tmp_path, capsys):
    ran, program, data = tmp_path / "ran", tmp_path / "app.sh", tmp_path / "input.txt"
    program.write_text(f"touch {ran}\n")
    data.write_text("input\n")
    out, extra = {"folder": (tmp_path / "results", []), "the program": (program, []),
                  "an input of the program": (data, []),
                  "trace not an archive": (tmp_path / "run.mpinside", ["--trace"])}[case]
    if case == "folder":
        out.mkdir()
    if case == "trace not an archive":
        (tmp_path / "run.mpinside.otf2").mkdir()
        (tmp_path / "run.mpinside.otf2" / "notes.txt").write_text("mine\n")
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["collect", "-o", str(out), "--force", *extra, "--", "sh", str(program), str(data)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("perfkit collect: error: "), err
    expected = {"folder": "is a folder, not a file", "the program": "is also an input",
                "an input of the program": "is also an input", "trace not an archive": "is not an OTF2 archive"}
    assert expected[case] in err
    assert not ran.exists() and before == {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}


@needs_mpi
def test_a_failed_run_leaves_the_earlier_out_as_it_was_and_says_so(tmp_path):
    out = tmp_path / "run.mpinside"
    out.write_text("an earlier profile\n")
    result = collect(["sh", "-c", "exit 3"], out, overwrite=True)
    assert result.returncode == 3 and result.output is None
    assert result.message == (f"the program did not reach MPI_Finalize on every rank (exit status 3); no profile "
                              f"written; {out} is from an earlier run, left as it was")
    pid = tmp_path / "pid"
    result = collect(["sh", "-c", f"echo $$ > {pid}; exec sleep 60"], out, overwrite=True, timeout=1)
    assert result.returncode == 124
    assert result.message == f"the launch was stopped after 1 s; no profile written; {out} is from an earlier " \
                             f"run, left as it was"
    assert not Path(f"/proc/{pid.read_text().strip()}").exists()  # the launch was stopped and reaped
    assert out.read_text() == "an earlier profile\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    result = collect(["sh", "-c", "exit 3"], tmp_path / "new.mpinside")
    assert result.message.endswith(f"no profile written to {tmp_path / 'new.mpinside'}")
    result = collect(["sh", "-c", "exit 124"], tmp_path / "new.mpinside")  # the timeout's status, without a timeout
    assert result.returncode == 124 and "exit status 124" in result.message and "stopped after" not in result.message


@needs_mpi
def test_temporaries_of_a_killed_collect_are_removed_by_the_next_one_which_says_so(tmp_path, capsys):
    ended = subprocess.Popen(["true"])
    ended.wait()  # its pid runs no more: the owner of the temporaries below was killed
    folder = tmp_path / f".run.mpinside.collect.perfkit-tmp-{atomic.HOST}-{ended.pid}"
    folder.mkdir()
    (folder / "raw").write_bytes(b"half a raw file")
    half = tmp_path / f".run.mpinside.perfkit-tmp-{atomic.HOST}-{ended.pid}"
    half.write_text("half a profile")
    running = tmp_path / f".run.mpinside.collect.perfkit-tmp-{atomic.HOST}-{os.getppid()}"  # owner runs: kept
    running.mkdir()
    assert main(["collect", "-o", str(tmp_path / "run.mpinside"), "--", "sh", "-c", "exit 0"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"perfkit: removing 2 temporary file(s) left by an earlier run that was killed: {folder.name}, "
                      f"{half.name}")
    assert not folder.exists() and not half.exists() and running.exists()


def test_a_folder_that_cannot_be_written_is_refused_before_the_launch(tmp_path, capsys):
    ran = tmp_path / "ran"
    if os.geteuid() == 0:  # root may write in any folder of a writable file system: /proc takes no new files
        folder = Path("/proc")
    else:
        folder = tmp_path / "locked"
        folder.mkdir(mode=0o555)
    out = folder / "run.mpinside"
    assert main(["collect", "-o", str(out), "--", "sh", "-c", f"touch {ran}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"perfkit collect: error: cannot write in the folder {folder} (to write run.mpinside in)")
    assert len(err.splitlines()) == 1 and not ran.exists() and not out.exists()
