"""``perfkit collect`` killed at random moments (SIGTERM, SIGINT, SIGKILL), before and after its launch started,
half of the times over an earlier OUT: within 5 s of the kill no process of the launch runs, OUT is absent or
the earlier one byte for byte, a stopped command says so in one line with status 128 + N, and the next collect
removes the temporaries a SIGKILL left, saying so. The real console script runs a small MPI program.

A process of the launch is one whose environment holds this test's mark (every process perfkit starts
inherits it: the watchdog, mpirun, its daemons, the ranks) or whose command line names the test's program.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import perfkit
from perfkit import atomic
from perfkit.collect.launch import mpirun_command

SCRIPT = Path(sys.executable).with_name("perfkit")
SEED = 20261126
KILLS = 10
SECONDS = 2.0  # the program's run, uninterrupted [s]
KILLED_SECONDS = 30.0  # the program's run when it is to be killed: far beyond GONE_WITHIN, so a survivor is seen [s]
GONE_WITHIN = 5.0  # [s] after the kill
MARK = "PERFKIT_KILL_TEST"
STOPPED = {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGHUP: 129}
MPIS = {"openmpi": ("mpicc", "mpirun"), "mpich": ("mpicc.mpich", "mpiexec.mpich")}
PROGRAM = r"""
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>
/* Sleeps argv[1] seconds between MPI_Init and MPI_Finalize, waking every 20 ms (no busy waiting). */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    double start = MPI_Wtime(), seconds = argc > 1 ? atof(argv[1]) : 2.0;
    while (MPI_Wtime() - start < seconds) usleep(20000);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
"""


def _missing(mpi: str) -> str | None:
    """Why the test cannot run with ``mpi`` (None: it can)."""
    if not SCRIPT.exists():
        return f"no perfkit console script next to {sys.executable}"
    return next((f"{tool} not on PATH" for tool in MPIS[mpi] if shutil.which(tool) is None), None)


pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the test reads /proc")


def _build(name: str, tmp_path_factory) -> tuple[str, Path, dict[str, str]]:
    """The MPI, the program built with its compiler (a unique path), the environment that builds the collector."""
    missing = _missing(name)
    if missing:
        pytest.skip(f"{name}: {missing}")
    cc, _ = MPIS[name]
    folder = tmp_path_factory.mktemp(f"program-{name}")
    (folder / "sleeper.c").write_text(PROGRAM)
    subprocess.run([cc, "-O2", str(folder / "sleeper.c"), "-o", str(folder / "sleeper")], check=True)
    env = {**os.environ, "MPICC": cc, "OMPI_MCA_mpi_yield_when_idle": "1"}
    if name == "mpich":
        env["MPIFORT"] = "mpifort.mpich"
    return name, folder / "sleeper", env


@pytest.fixture(scope="module", params=list(MPIS))
def mpi(request, tmp_path_factory) -> tuple[str, Path, dict[str, str]]:
    """Each MPI: Open MPI keeps its ranks in process groups of their own, MPICH in sessions of their own."""
    return _build(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def openmpi(tmp_path_factory) -> tuple[str, Path, dict[str, str]]:
    return _build("openmpi", tmp_path_factory)


def launch_processes(mark: str, program: Path) -> dict[int, str]:
    """Running processes (a zombie has ended) carrying ``MARK=mark`` or naming ``program``: pid -> command line."""
    entry, name = f"{MARK}={mark}".encode(), str(program).encode()
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") or name in command:
                found[int(pid)] = command.replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
    return found


def temporaries(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.perfkit-tmp-*"))


class Runs:
    """``perfkit collect`` of the program into ``folder/run.mpinside``, each run marked anew."""

    def __init__(self, mpi: tuple[str, Path, dict[str, str]], folder: Path) -> None:
        name, self.program, self.env = mpi
        launcher = MPIS[name][1]
        self.argv = [str(SCRIPT), "collect", "-o", str(folder / "run.mpinside"), "--force", "--",
                     *mpirun_command(2, [str(self.program)], launcher=launcher)]
        self.folder, self.out, self.count = folder, folder / "run.mpinside", 0

    def start(self, seconds: float = KILLED_SECONDS) -> tuple[subprocess.Popen, str]:
        """Start collect of a program that runs ``seconds`` [s]; the process and its mark."""
        self.count += 1
        mark = f"{os.getpid()}-{self.count}"
        err = open(self.folder.parent / "err", "w")
        with err:
            proc = subprocess.Popen([*self.argv, f"{seconds:g}"], env={**self.env, MARK: mark},
                                    stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        return proc, mark

    def err(self) -> str:
        return (self.folder.parent / "err").read_text()

    def ranks(self, mark: str) -> list[int]:
        """The program's processes now running (the command lines of perfkit and mpirun name it too)."""
        return [pid for pid, c in launch_processes(mark, self.program).items() if c.split(" ")[0] == str(self.program)]

    def launcher(self, mark: str) -> bool:
        """Whether mpirun runs."""
        return any(c.startswith("mpirun ") for c in launch_processes(mark, self.program).values())

    def until_launched(self, proc: subprocess.Popen, mark: str, timeout: float = 120) -> float:
        """Wait for the program to run (its ranks exist); the time waited [s]."""
        start = time.monotonic()
        while not self.ranks(mark):
            assert proc.poll() is None, f"collect ended before its program ran: {self.err()}"
            assert time.monotonic() - start < timeout, "the program did not start"
            time.sleep(0.01)
        return time.monotonic() - start

    def gone(self, mark: str, since: float) -> dict[int, str]:
        """What of the launch still runs ``GONE_WITHIN`` s after ``since`` (nothing, once all of it ended)."""
        while (left := launch_processes(mark, self.program)) and time.monotonic() - since < GONE_WITHIN:
            time.sleep(0.02)
        return left


def test_collect_killed_anywhere_leaves_nothing_running_and_no_stale_output(openmpi, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    runs = Runs(openmpi, folder)
    proc, mark = runs.start(SECONDS)
    launch_at = runs.until_launched(proc, mark)
    assert proc.wait(timeout=120) == 0, runs.err()
    assert not launch_processes(mark, runs.program) and not temporaries(folder), runs.err()
    earlier = runs.out.read_bytes()
    assert int(perfkit.open_profile(runs.out)["nprocs"].item()) == 2
    rng = np.random.default_rng(SEED)
    with_earlier = set(rng.permutation(KILLS)[: KILLS // 2].tolist())
    kinds = [signal.SIGTERM, signal.SIGINT, signal.SIGKILL, signal.SIGTERM, signal.SIGINT]  # each, in each phase
    signals = [[kinds[i] for i in rng.permutation(KILLS // 2)] for _ in range(2)]
    outcomes: Counter[str] = Counter()
    for k in range(KILLS):
        sig = signals[k % 2][k // 2]
        if k in with_earlier:
            runs.out.write_bytes(earlier)
        else:
            runs.out.unlink(missing_ok=True)
        left_before = temporaries(folder)
        proc, mark = runs.start()
        if k % 2 == 0:  # before the ranks run: Python starts, perfkit imports, checks, builds; at the latest mpirun
            target = time.monotonic() + rng.uniform(0.4, 1.0) * launch_at
            while time.monotonic() < target and not runs.launcher(mark):
                time.sleep(0.02)
        else:
            runs.until_launched(proc, mark)
            time.sleep(rng.uniform(0.0, 0.8) * SECONDS)
        launched = bool(runs.ranks(mark))
        when = "after the launch" if launched else "before the launch"
        if not launched and runs.launcher(mark):
            when = "while mpirun starts the ranks"
        proc.send_signal(sig)
        killed = time.monotonic()
        status = proc.wait(timeout=120)
        left = runs.gone(mark, killed)
        err = runs.err()
        assert not left, f"kill {k} ({sig.name}): still running {GONE_WITHIN:g} s later: {left}\n{err}"
        python_starting = err.startswith("Fatal Python error: init_import_site")  # before any of perfkit ran
        assert python_starting or "Traceback" not in err, err
        # OUT: absent, or the earlier one byte for byte, or (the kill came after the rename) the complete new one
        if runs.out.exists() and (k not in with_earlier or runs.out.read_bytes() != earlier):
            assert int(perfkit.open_profile(runs.out)["nprocs"].item()) == 2, f"kill {k}: OUT is neither old nor new"
            out = "new"
        else:
            out = "earlier" if k in with_earlier else "absent"
        removed = [path for path in left_before if not path.exists()]
        if removed and status != -signal.SIGKILL:  # what an earlier SIGKILL left: removed, and said so
            assert all(path.name in err for path in removed) and "perfkit: removing " in err, err
        mine = [p for p in temporaries(folder) if p.name.endswith(f"-{proc.pid}")]
        if status == 0:
            phase = "finished first"
        elif sig == signal.SIGKILL:
            assert status == -signal.SIGKILL, err
            phase = "SIGKILL"
        elif status == -sig or python_starting or "perfkit: stopped by" in err:  # before the command: nothing begun
            assert not mine and not launched, err
            phase = f"{sig.name} while starting"
        else:
            assert status == STOPPED[sig], err
            said = [line for line in err.splitlines() if line.startswith("perfkit") and "removing" not in line]
            assert len(said) == 1, err
            assert said[0].startswith(f"perfkit collect: stopped by {sig.name}; launch stopped, "), err
            assert said[0].endswith("temporary files removed") and not mine, err
            phase = sig.name
        outcomes[f"{phase}, {when}, OUT {out}"] += 1
    left_before = temporaries(folder)
    proc, mark = runs.start(SECONDS)
    assert proc.wait(timeout=120) == 0, runs.err()
    assert not temporaries(folder) and not runs.gone(mark, time.monotonic())
    if left_before:
        assert "perfkit: removing " in runs.err(), runs.err()
    print(f"{openmpi[0]}: {dict(sorted(outcomes.items()))}")
    assert sum(n for key, n in outcomes.items() if "after the launch" in key and "finished" not in key) >= 3
    assert sum(n for key, n in outcomes.items() if "after the launch" not in key) >= 3


def test_sigkill_after_the_launch_leaves_nothing_running_and_the_next_run_cleans_up(mpi, tmp_path):
    """SIGKILL: the watchdog stops ranks that are in other process groups (Open MPI) or sessions (MPICH); the next
    collect, stopped by SIGHUP, removes the temporaries the killed one left and says so, in one line each."""
    folder = tmp_path / "out"
    folder.mkdir()
    runs = Runs(mpi, folder)
    proc, mark = runs.start()
    runs.until_launched(proc, mark)
    groups = {os.getpgid(pid) for pid in runs.ranks(mark)} | {os.getpgid(proc.pid)}
    sessions = {os.getsid(pid) for pid in runs.ranks(mark)} | {os.getsid(proc.pid)}
    print(f"{mpi[0]}: perfkit and 2 ranks in {len(groups)} process groups, {len(sessions)} sessions")
    proc.kill()
    killed = time.monotonic()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert not runs.gone(mark, killed), runs.err()
    left = temporaries(folder)
    assert [p.name for p in left] == [f".run.mpinside.collect.perfkit-tmp-{atomic.HOST}-{proc.pid}"]
    proc, mark = runs.start()
    runs.until_launched(proc, mark)
    proc.send_signal(signal.SIGHUP)
    killed = time.monotonic()
    assert proc.wait(timeout=60) == STOPPED[signal.SIGHUP], runs.err()
    assert not runs.gone(mark, killed)
    said = [line for line in runs.err().splitlines() if line.startswith("perfkit")]
    assert said == [f"perfkit: removing 1 temporary file(s) left by an earlier run that was killed: {left[0].name}",
                    f"perfkit collect: stopped by SIGHUP; launch stopped, {runs.out} not written, temporary files "
                    f"removed"], runs.err()
    assert not runs.out.exists() and not temporaries(folder)
