"""Put the collector into a launch command: Open MPI's ``-x``, MPICH/Intel MPI's ``-genv``, or the environment."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "mpiexec.hydra", "mpirun.openmpi", "mpiexec.openmpi",
                 "mpirun.mpich", "mpiexec.mpich")


@lru_cache(maxsize=16)
def launcher_family(launcher: str) -> str:
    """``"openmpi"``, ``"hydra"`` (MPICH, Intel MPI, Cray's mpiexec), ``"srun"`` or ``"other"``."""
    name = Path(launcher).name
    if name == "srun":
        return "srun"
    if name not in MPI_LAUNCHERS:
        return "other"
    exe = shutil.which(launcher)
    if exe is None:
        return "other"
    try:
        text = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "other"
    out = (text.stdout + text.stderr).lower()
    if "open mpi" in out or "open-mpi" in out or "openrte" in out:
        return "openmpi"
    if "hydra" in out or "intel" in out or "mpich" in out:
        return "hydra"
    return "other"


def with_environment(launch: Sequence[str], variables: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The launch command and the extra environment that give every rank ``variables``.

    Open MPI's ``mpirun`` gets ``-x NAME=value`` and MPICH's ``mpiexec`` ``-genv NAME value`` (so that
    ranks on other nodes see them too and ``mpirun`` itself is not preloaded); ``srun`` and anything
    else get them in the environment (``srun`` exports it to the ranks by default).
    """
    launch = list(launch)
    family = launcher_family(launch[0])
    if family == "openmpi":
        flags = [f for name, value in variables.items() for f in ("-x", f"{name}={value}")]
        return [launch[0], *flags, *launch[1:]], {}
    if family == "hydra":
        flags = [f for name, value in variables.items() for f in ("-genv", name, value)]
        return [launch[0], *flags, *launch[1:]], {}
    return launch, dict(variables)


def mpirun_command(nprocs: int, program: Sequence[str], *, launcher: str = "mpirun") -> list[str]:
    """An Open MPI launch of ``program`` on ``nprocs`` ranks of this machine (more ranks than cores allowed)."""
    cmd = [launcher, "-np", str(nprocs)]
    if launcher_family(launcher) == "openmpi":
        cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return [*cmd, *program]
