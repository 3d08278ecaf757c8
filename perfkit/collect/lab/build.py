"""Compiling the lab programs with the MPI wrappers, cached by content in the user's cache dir."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from perfkit.collect.build import cache_dir as collector_cache
from perfkit.collect.build import compiler, wrapper_configuration

PROGRAMS = Path(__file__).resolve().parent / "programs"
C_SOURCES = ("lab.c", "lab_sleep.c")
EXCHANGE_SOURCES = ("exchange.c", "lab_sleep.c")
FORTRAN_SOURCE = "lab.F90"
CFLAGS = ("-O2",)
INTERFACES = {"use_mpi": (), "mpif_h": ("-DPK_LAB_MPIF_H",)}


class LabBuildError(RuntimeError):
    """A lab program did not compile; the message holds the command and the compiler's output."""


def cache_dir() -> Path:
    """``lab`` under the collector's cache (``$PERFKIT_CACHE``, else ``$XDG_CACHE_HOME/perfkit``)."""
    return collector_cache() / "lab"


def missing_tools(language: str = "c") -> str | None:
    """Why the lab cannot build or run ``language`` programs here (None when it can)."""
    need = [compiler("c")[0], "mpirun"] + ([compiler("fortran")[0]] if language == "fortran" else [])
    absent = [tool for tool in need if shutil.which(tool) is None]
    return f"not found on PATH: {', '.join(absent)}" if absent else None


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabBuildError(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")


def binary(language: str = "c", interface: str = "use_mpi") -> Path:
    """The lab executable for ``language``, compiled on first use and cached by source hash."""
    if language not in ("c", "fortran"):
        raise ValueError(f"language must be 'c' or 'fortran', got {language!r}")
    cc = compiler("c")
    fc = compiler("fortran") if language == "fortran" else []
    flags = [*CFLAGS, *(INTERFACES[interface] if language == "fortran" else ())]
    sources = [*C_SOURCES] if language == "c" else ["lab_sleep.c", FORTRAN_SOURCE]
    digest = hashlib.sha256(repr((cc, fc, flags, [wrapper_configuration(c) for c in (cc, fc) if c])).encode())
    for name in sources:
        digest.update((PROGRAMS / name).read_bytes())
    target = cache_dir() / digest.hexdigest()[:20] / ("lab" if language == "c" else "lab_f")
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        work = Path(tmp)
        out = work / target.name
        if language == "c":
            _run([*cc, *flags, "-o", str(out), *(str(PROGRAMS / s) for s in C_SOURCES)], work)
        else:
            _run([*cc, *CFLAGS, "-c", "-o", str(work / "lab_sleep.o"), str(PROGRAMS / "lab_sleep.c")], work)
            _run([*fc, *flags, "-o", str(out), str(PROGRAMS / FORTRAN_SOURCE), str(work / "lab_sleep.o")], work)
        os.replace(out, target)  # atomic: concurrent builders leave one complete file
    return target


def exchange_binary() -> Path:
    """The pattern-driven exchange program (``programs/exchange.c``) built with ``$MPICC`` (else mpicc)."""
    cc = compiler("c")
    digest = hashlib.sha256(repr((cc, CFLAGS, wrapper_configuration(cc))).encode())
    for name in EXCHANGE_SOURCES:
        digest.update((PROGRAMS / name).read_bytes())
    target = cache_dir() / digest.hexdigest()[:20] / "exchange"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        _run([*cc, *CFLAGS, "-o", str(out), *(str(PROGRAMS / s) for s in EXCHANGE_SOURCES)], Path(tmp))
        os.replace(out, target)
    return target
