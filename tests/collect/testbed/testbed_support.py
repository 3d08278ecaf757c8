"""Shared by the testbed tests: why they skip, and the exchange program's report of where ranks ran."""

from __future__ import annotations

import re
import shutil

from perfkit.collect.testbed import why_unavailable

WHY_NO_TESTBED = why_unavailable()
WHY_NO_OPENMPI = None if shutil.which("mpicc") and shutil.which("mpirun") else "Open MPI (mpicc, mpirun) not found"
WHY_NO_MPICH = (None if shutil.which("mpicc.mpich") and shutil.which("mpiexec.hydra")
                else "MPICH (mpicc.mpich, mpiexec.hydra) not found; Debian: apt install mpich")


def hosts_reported(stdout: str) -> dict[int, str]:
    """``exchange: host R NAME`` lines: where each rank ran, by its own ``gethostname``."""
    return {int(r): name for r, name in re.findall(r"^exchange: host (\d+) (\S+)$", stdout, re.M)}
