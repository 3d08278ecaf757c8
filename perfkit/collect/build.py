"""Build the collector library with the user's MPI compiler wrappers, once per MPI and source version.

``mpicc`` compiles the runtime and the generated wrappers; when ``mpifort`` works, it links the
library so the Fortran wrappers find the MPI library's own Fortran ``pmpi_*_`` entry points.
``MPICC`` / ``MPIFORT`` override the commands. ``trace=True`` builds a separate library that also
writes OTF2 traces (``src/pk_trace.c``, compiled with ``-DPK_TRACE`` and linked with the OTF2 library
found by ``otf2-config``): the library used without ``--trace`` neither links OTF2 nor tests for it.
The result is cached under
``$PERFKIT_CACHE`` (default ``$XDG_CACHE_HOME/perfkit`` or ``~/.cache/perfkit``) in a directory
named by a hash of the sources and of the compilers' configuration.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from perfkit.collect.generate import c_source, fortran_source

LIBRARY = "libperfkit_collect.so"
SOURCES = ("pk_runtime.c", "pk_runtime.h")
TRACE_SOURCES = ("pk_trace.c", "pk_trace.h")
CFLAGS = ("-O2", "-fPIC", "-std=gnu11", "-Wall", "-Wno-unused-variable", "-Wno-unused-but-set-variable")


class CollectorBuildError(RuntimeError):
    """The MPI compiler wrappers are missing or failed; the message says which and how."""


def compiler(language: str) -> list[str]:
    """The MPI compiler command for ``"c"`` or ``"fortran"``: ``$MPICC`` / ``$MPIFORT``, else mpicc / mpifort."""
    env, default = {"c": ("MPICC", "mpicc"), "fortran": ("MPIFORT", "mpifort")}[language]
    return shlex.split(os.environ.get(env) or default)


def cache_dir() -> Path:
    """Where built libraries and lab programs are kept."""
    root = os.environ.get("PERFKIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "perfkit")
    return Path(root)


def _available(cmd: list[str]) -> bool:
    return bool(cmd) and shutil.which(cmd[0]) is not None


def wrapper_configuration(cmd: list[str]) -> str:
    """What the wrapper compiles with (``--showme`` for Open MPI, ``-show`` for MPICH)."""
    for flag in ("--showme", "-show"):
        try:
            done = subprocess.run([*cmd, flag], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return " ".join(cmd)


def otf2_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags of the OTF2 library (``otf2-config``); CollectorBuildError without it."""
    config = shutil.which("otf2-config")
    if config is None:
        raise CollectorBuildError("--trace needs the OTF2 library and its otf2-config, not on PATH "
                                  "(Debian: apt install libotf2-trace-dev)")
    out = []
    for flags in (["--cflags"], ["--ldflags", "--libs"]):
        done = subprocess.run([config, *flags], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise CollectorBuildError(f"otf2-config {' '.join(flags)} failed: {done.stderr.strip()}")
        out.append(shlex.split(done.stdout))
    return out[0], out[1]


def build_library(*, force: bool = False, fortran: bool | None = None, trace: bool = False) -> Path:
    """Build (or find in the cache) the collector library; return its path.

    ``fortran=None`` adds the Fortran wrappers when ``mpifort`` is available; ``True`` requires them.
    ``trace=True``: the library that also writes OTF2 traces (needs ``otf2-config``).
    """
    cc, fc = compiler("c"), compiler("fortran")
    if not _available(cc):
        raise CollectorBuildError(
            f"no MPI C compiler wrapper {cc[0]!r} on PATH: install your MPI's development package "
            "(Debian: apt install openmpi-bin libopenmpi-dev) or set MPICC")
    with_fortran = _available(fc) if fortran is None else fortran
    if with_fortran and not _available(fc):
        raise CollectorBuildError(f"no MPI Fortran compiler wrapper {fc[0]!r} on PATH (Debian: apt install gfortran)")
    src = resources.files("perfkit.collect") / "src"
    texts = {name: (src / name).read_text() for name in SOURCES + (TRACE_SOURCES if trace else ())}
    cflags, ldflags = otf2_flags() if trace else ([], [])
    if trace:
        cflags = ["-DPK_TRACE", *cflags]
    texts["pk_wrappers.c"] = c_source()
    if with_fortran:
        texts["pk_fwrappers.c"] = fortran_source()
    digest = hashlib.sha256()
    for name in sorted(texts):
        digest.update(name.encode() + b"\0" + texts[name].encode() + b"\0")
    digest.update(wrapper_configuration(cc).encode())
    if with_fortran:
        digest.update(wrapper_configuration(fc).encode())
    digest.update(shlex.join([*cflags, *ldflags]).encode())
    target = cache_dir() / "collect" / digest.hexdigest()[:16]
    library = target / LIBRARY
    if library.exists() and not force:
        return library
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    try:
        for name, text in texts.items():
            (work / name).write_text(text)
        objects = []
        for name in texts:
            if name.endswith(".c"):
                _run([*cc, *CFLAGS, *cflags, "-c", name, "-o", name[:-2] + ".o"], work)
                objects.append(name[:-2] + ".o")
        linker = fc if with_fortran else cc
        _run([*linker, "-shared", "-o", LIBRARY, *objects, *ldflags, "-lm", "-lpthread"], work)
        if force and target.exists():
            shutil.rmtree(target)
        try:
            work.rename(target)
        except OSError:  # built meanwhile by another process: use that one
            pass
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return library


def _run(cmd: list[str], cwd: Path) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise CollectorBuildError(f"building the collector failed: {shlex.join(cmd)}\n{done.stderr.strip()}")
