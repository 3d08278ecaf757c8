"""GROMACS (``gmx_mpi mdrun``, Debian's ``gromacs``): a water box made here, its launch, and its own time accounting.

The input is SPC water (``spc216.gro`` from GROMACS's data, replicated by ``gmx solvate``) in a cubic box, PME
electrostatics, so a run has domain decomposition, halo exchange ("Comm. coord.", "Wait + Comm. F") and the PME
redistribution and 3D-FFT transposes between ranks. ``md.log``'s "R E A L   C Y C L E   A N D   T I M E
A C C O U N T I N G" table is GROMACS's own account of where the wall time went.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfkit.errors import PerfkitFormatError

#: The MD parameters [GROMACS .mdp]: 2 fs steps, Verlet lists, PME, 0.9 nm cut-offs, a thermostat.
MDP = """integrator = md
nsteps = {steps}
dt = 0.002
cutoff-scheme = Verlet
nstlist = 10
coulombtype = PME
rcoulomb = 0.9
rvdw = 0.9
tcoupl = v-rescale
tc-grps = System
tau-t = 0.1
ref-t = 300
constraints = h-bonds
nstenergy = 100
nstlog = 100
"""
TOPOLOGY = """#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spc.itp"
[ system ]
water box
[ molecules ]
SOL {molecules}
"""
_ROW = re.compile(r"^ (\S.*?)\s{2,}(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_UNCOUNTED = re.compile(r"^ (\S.*?)\s{2,}([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")  # "Rest" and "Total": no counts
_TIME = re.compile(r"^\s+Time:\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_HEADER = "R E A L   C Y C L E   A N D   T I M E   A C C O U N T I N G"


def missing() -> str | None:
    """Why GROMACS cannot run here (None when ``gmx`` and ``gmx_mpi`` are on PATH)."""
    absent = [tool for tool in ("gmx", "gmx_mpi") if shutil.which(tool) is None]
    return f"{', '.join(absent)} not on PATH (Debian: apt install gromacs)" if absent else None


def water_box(folder: str | Path, *, box_nm: float = 3.0, steps: int = 500) -> Path:
    """Make ``folder/md.tpr``: SPC water in a cube of ``box_nm`` nm (3 nm: 884 molecules, 2,652 atoms), ``steps``
    MD steps of 2 fs. Runs ``gmx solvate`` and ``gmx grompp``; their output is in ``folder/*.log``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _gmx(folder, "solvate", ["-cs", "spc216.gro", "-box", *[f"{box_nm:g}"] * 3, "-o", "water.gro"])
    molecules = sum(1 for line in (folder / "water.gro").read_text().splitlines() if line[10:15].strip() == "OW")
    (folder / "topol.top").write_text(TOPOLOGY.format(molecules=molecules))
    (folder / "md.mdp").write_text(MDP.format(steps=steps))
    _gmx(folder, "grompp", ["-f", "md.mdp", "-c", "water.gro", "-p", "topol.top", "-o", "md.tpr", "-maxwarn", "1"])
    return folder / "md.tpr"


def _gmx(folder: Path, tool: str, args: list[str]) -> None:
    with open(folder / f"{tool}.log", "w") as log:
        done = subprocess.run(["gmx", "-quiet", tool, *args], cwd=folder, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        raise RuntimeError(f"gmx {tool} failed (exit {done.returncode}); see {folder / f'{tool}.log'}")


def mdrun_command(launch: Sequence[str], tpr: str | Path, log: str | Path) -> list[str]:
    """``launch`` (e.g. ``mpirun -np 4``) running ``gmx_mpi mdrun`` on ``tpr``: one OpenMP thread per rank, non-bonded
    on the CPU, no final coordinates, the log to ``log``."""
    return [*launch, "gmx_mpi", "mdrun", "-s", str(tpr), "-ntomp", "1", "-nb", "cpu", "-noconfout", "-g", str(log)]


@dataclass(frozen=True)
class CycleAccounting:
    """GROMACS's own account of a run's wall time (``md.log``): one row per part, the totals."""

    parts: pd.DataFrame  # index: part ("Comm. coord.", "PME mesh", "PME 3D-FFT Comm.", ..., "Rest"); ranks, threads,
    # calls (-1 for "Rest"), wall_s [s], giga_cycles, percent; PME's breakdown rows have pme_breakdown True
    wall_s: float  # the run's wall time by GROMACS [s]
    core_s: float  # wall time x cores used [s] (not CPU time)


def read_cycle_accounting(path: str | Path) -> CycleAccounting:
    """The cycle and time accounting of ``md.log`` at ``path``."""
    path = Path(path)
    lines = path.read_text(errors="replace").splitlines()
    start = next((k for k, line in enumerate(lines) if _HEADER in line), None)
    if start is None:
        raise PerfkitFormatError(path, None, f"no '{_HEADER}' table (did mdrun finish?)")
    rows, breakdown, wall = [], False, None
    for number, line in enumerate(lines[start:], start + 1):
        if line.startswith(" Breakdown of PME mesh"):
            breakdown = True
        elif (match := _ROW.match(line)) is not None:
            name, ranks, threads, calls, seconds, cycles, percent = match.groups()
            rows.append((name.strip(), int(ranks), int(threads), int(calls), float(seconds), float(cycles),
                         float(percent), breakdown))
        elif (match := _UNCOUNTED.match(line)) is not None:
            name, seconds, cycles, percent = match.groups()
            if name == "Total":
                wall = float(seconds)
            else:
                rows.append((name, -1, -1, -1, float(seconds), float(cycles), float(percent), breakdown))
        elif (match := _TIME.match(line)) is not None:
            if wall is None or not rows:
                raise PerfkitFormatError(path, number, "'Time:' line before the accounting table's rows and Total")
            parts = pd.DataFrame(rows, columns=["part", "ranks", "threads", "calls", "wall_s", "giga_cycles",
                                                "percent", "pme_breakdown"]).set_index("part")
            return CycleAccounting(parts, float(match.group(2)), float(match.group(1)))
    raise PerfkitFormatError(path, len(lines), "the accounting table ends without its 'Time:' line")
