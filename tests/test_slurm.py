"""docs/scale.md's dask-jobqueue recipe against a real Slurm started on this machine.

The ``slurm`` fixture writes a ``slurm.conf`` for one node (this host, 2 CPUs) and one partition
into a fresh folder, starts ``slurmctld`` and ``slurmd`` from it (no munge: ``auth/none``, no
accounting), waits for ``sinfo`` to show the node idle, and afterwards cancels the jobs, stops the
daemons and removes the folder. Folders and processes carry ``PREFIX``: what a crashed run left is
stopped (by pid, after checking its command line or environment names such a folder) and removed
before the next start. It needs root (Slurm's daemons run as ``SlurmUser=root``) and Debian's
``slurm-wlm``; the test runs the recipe's code block as written, with ``/scratch`` replaced by a
temporary folder holding bundled mpiP reports, and compares what it computed on the
``SLURMCluster`` workers with the same analyses of ``perfkit.open_runs`` on the files.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import xarray as xr

import perfkit

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "tests" / "data" / "mpip" / "real" / "CloverLeaf-strong"
DOC = ROOT / "docs" / "scale.md"
PREFIX = "perfkit-slurm-"
DAEMONS = ("slurmctld", "slurmd")
#: The partition the recipe's ``queue`` names.
PARTITION = "normal"
#: How long the daemons and the node may take to come up, and jobs to go [s].
START_TIMEOUT, STOP_TIMEOUT = 60.0, 30.0

CONF = """\
ClusterName=perfkit
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory={memory_mb} State=UNKNOWN
PartitionName={partition} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass(frozen=True)
class Slurm:
    """A running test cluster: its folder and ``slurm.conf``."""

    folder: Path
    conf: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ours(pid: int) -> bool:
    """Whether process ``pid`` belongs to a test cluster: its command line or environment names a ``PREFIX`` folder."""
    marker = f"{tempfile.gettempdir()}/{PREFIX}".encode()
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return marker in cmdline or any(v.startswith(b"SLURM_CONF=" + marker) for v in environ.split(b"\0"))


def _stop(pids: list[int]) -> None:
    """SIGTERM, then SIGKILL after ``STOP_TIMEOUT`` s, to each of ``pids`` still running."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT
    for pid in pids:
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            try:  # reap our own children; others' end without us
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                pass
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _clean_leftovers() -> None:
    """Stop the processes of earlier test clusters (daemons, job steps, workers) and remove their folders."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) != os.getpid()]
    _stop([pid for pid in pids if _ours(pid)])
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        shutil.rmtree(folder, ignore_errors=True)


def _run(conf: Path, *command: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=30, check=False).stdout


def _jobs_end(conf: Path) -> bool:
    """Whether ``squeue`` shows no job (running or completing) within ``STOP_TIMEOUT`` s."""
    deadline = time.monotonic() + STOP_TIMEOUT
    while _run(conf, "squeue", "-h").strip():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _memory_mb() -> int:
    """RealMemory of the node [MB]: 4 GB, or less on a smaller machine (slurmd drains a node that has less)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return int(min(4096, total * 0.8))


@pytest.fixture(scope="module")
def slurm() -> Iterator[Slurm]:
    """slurmctld and slurmd on this machine, from a generated ``slurm.conf`` (see the module docstring)."""
    missing = [name for name in (*DAEMONS, "sinfo", "sbatch", "squeue", "scancel") if shutil.which(name) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing; Debian: apt-get install slurm-wlm)")
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld and slurmd (SlurmUser=root) needs root")
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed (pip install perfkit[cluster])")
    _clean_leftovers()
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    for sub in ("state", "spool", "logs"):
        (folder / sub).mkdir()
    conf = folder / "slurm.conf"
    conf.write_text(CONF.format(host=socket.gethostname().split(".")[0], ctld_port=_free_port(),
                                slurmd_port=_free_port(), folder=folder, memory_mb=_memory_mb(),
                                partition=PARTITION))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = []
    try:
        for name in DAEMONS:
            with open(folder / f"{name}.out", "wb") as out:
                daemons.append(subprocess.Popen([name, "-D", "-f", str(conf)], stdout=out, stderr=subprocess.STDOUT,
                                                env=env, start_new_session=True))
        deadline = time.monotonic() + START_TIMEOUT
        while _run(conf, "sinfo", "-h", "-N", "-o", "%T").strip() != "idle":
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                logs = "\n".join((folder / f"{name}.out").read_text()[-2000:] for name in DAEMONS)
                pytest.fail(f"the node did not become idle in {START_TIMEOUT:.0f} s:\n{logs}")
            time.sleep(0.5)
        yield Slurm(folder, conf)
    finally:
        _run(conf, "scancel", "--full", "--partition", PARTITION)
        _jobs_end(conf)
        _stop([d.pid for d in daemons])
        _clean_leftovers()


def _recipe() -> str:
    """The Slurm recipe's code block in docs/scale.md (the block that imports ``SLURMCluster``)."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    recipe = [block for block in blocks if "SLURMCluster(" in block]
    assert len(recipe) == 1, "docs/scale.md holds one code block with SLURMCluster"
    return recipe[0]


def test_the_scale_recipe_runs_on_slurm(slurm: Slurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe converts and analyses a study on SLURMCluster workers: what plain ``open_runs`` gives."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(STUDY, tmp_path / "study")
    code = _recipe()
    assert "/scratch/study" in code
    namespace: dict[str, object] = {}
    exec(compile(code.replace("/scratch", str(tmp_path)), str(DOC), "exec"), namespace)

    logs = sorted((tmp_path / "logs").glob("*.err"))
    assert len(logs) == 2, f"two Slurm jobs ran the workers: {logs}"
    assert all("Registered to" in log.read_text() for log in logs), [log.read_text()[-1500:] for log in logs]
    assert _jobs_end(slurm.conf), "cluster.close() cancelled the jobs"

    files = str(tmp_path / "study" / "**" / "*.mpiP")
    local = perfkit.open_runs(files)
    stored = perfkit.load(tmp_path / "study.zarr")
    assert sorted(stored["run"].values) == sorted(local["run"].values) and stored.sizes["run"] == 5
    stored = stored.sel(run=local["run"].values)
    xr.testing.assert_allclose(stored["profile"], local["profile"], rtol=0)
    runs = local["run"].values
    xr.testing.assert_allclose(namespace["pop"].sel(run=runs), perfkit.pop_metrics(local), rtol=1e-12)
    xr.testing.assert_allclose(namespace["imbalance"].sel(run=runs), perfkit.imbalance(local), rtol=1e-12)
    findings = namespace["findings"]
    assert isinstance(findings, pd.DataFrame) and len(findings)
    expected = perfkit.diagnose(local)
    pd.testing.assert_frame_equal(findings.sort_values(["run", "category", "title"], ignore_index=True),
                                  expected.sort_values(["run", "category", "title"], ignore_index=True), rtol=1e-9)
